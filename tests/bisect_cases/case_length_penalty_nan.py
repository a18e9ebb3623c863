"""A real decoding change between transformers 5.x releases, kept as a bisect case (not collected by the suite: the
file name does not start with test_). Its snapshot was recorded on transformers 5.17.0; `genguard bisect` must name
the first release that changed it (tests/bisect/test_real_cases.py)."""

import pytest

import pytest_genguard


@pytest.mark.genguard(allow_nonfinite=True)  # 5.17.0 computes NaN for EOS: the snapshot keeps it on purpose
def test_exponential_decay_length_penalty_while_eos_is_masked(genguard_snapshot):
    # min_new_tokens masks EOS with -inf; the exponential decay length penalty then added |score| * (factor^k - 1):
    # -inf + inf = NaN. Greedy argmax takes NaN as the maximum, so up to 5.17.0 generation stopped with EOS at the
    # first step the penalty applied, before min_new_tokens. A later release leaves a masked EOS masked.
    model, tokenizer = pytest_genguard.tiny_model("gpt2"), pytest_genguard.tiny_tokenizer()
    trace = pytest_genguard.record(
        model,
        tokenizer,
        ["the quick brown fox"],
        max_new_tokens=8,
        min_new_tokens=4,
        exponential_decay_length_penalty=(2, 1.5),
    )
    assert trace == genguard_snapshot
