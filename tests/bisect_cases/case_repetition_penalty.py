"""A real decoding change between transformers 5.x releases, kept as a bisect case (not collected by the suite: the
file name does not start with test_). Its snapshot was recorded on transformers 5.21.1, the last good release;
`genguard bisect` must name the first bad one (tests/bisect/test_real_cases.py)."""

import pytest_genguard


def test_repetition_penalty_ignores_left_padding(genguard_snapshot):
    # A penalty below 1 boosts tokens already in the input. Up to 5.21.1 that included the left-padding of the
    # shorter prompts, so '<pad>' got boosted and generated (prompt 0, step 4); from the first bad release on the
    # padding is not penalised.
    model, tokenizer = pytest_genguard.tiny_model("llama"), pytest_genguard.tiny_tokenizer()
    prompts = ["the quick brown fox", "once upon a time", "a b a b a b"]  # the first two are left-padded
    trace = pytest_genguard.record(model, tokenizer, prompts, max_new_tokens=8, repetition_penalty=0.05)
    assert trace == genguard_snapshot
