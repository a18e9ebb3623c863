"""`hf.tensor_parallel` in one process: what it does with a model that is not split (nothing), and record()'s refusal
of attention heads that do not divide among the ranks (the ranks faked: a real split runs under torchrun, in
tests/plugin/test_torchrun.py)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_genguard.hf import tensor_parallel
from pytest_genguard.hf.record import record
from pytest_genguard.hf.tiny import tiny_model


def test_a_model_in_one_process_is_not_tensor_parallel(gpt2: Any) -> None:
    state = gpt2.state_dict(keep_vars=True)
    assert tensor_parallel.world_size(gpt2) is None
    assert not any(tensor_parallel.is_dtensor(t) for t in state.values())
    assert tensor_parallel.local_shards(state) == state
    assert tensor_parallel.agreed(state, True) and not tensor_parallel.agreed(state, False)  # no ranks to ask


@pytest.mark.parametrize(("ranks", "refused"), [(2, False), (3, True), (4, True)])
def test_heads_that_do_not_divide_among_the_ranks_are_refused_with_the_counts_that_work(
    ranks: int, refused: bool, tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = tiny_model("llama")  # 4 attention heads, 2 key-value heads: 2 ranks work
    monkeypatch.setattr(tensor_parallel, "world_size", lambda m: ranks)
    if not refused:
        tensor_parallel.check_heads(model, "record()")
        return
    message = (
        rf"record\(\): the model is split over {ranks} ranks .* its 4 attention heads \(2 key-value heads\) do not "
        r"divide by .*run torchrun with --nproc-per-node 2\.$"
    )
    with pytest.raises(ValueError, match=message):
        record(model, tokenizer, ["hello"], max_new_tokens=2)


def test_calibrate_says_why_a_tensor_parallel_model_cannot_be_copied(
    tokenizer: Any, gpt2: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_genguard.hf.fidelity import calibrate

    trace = record(gpt2, tokenizer, ["hello"], max_new_tokens=2)
    monkeypatch.setattr(tensor_parallel, "world_size", lambda m: 2)
    with pytest.raises(ValueError, match=r"split over 2 ranks .* calibrate\(\) the same checkpoint loaded in one"):
        calibrate(gpt2, tokenizer, trace, ("int8",))
