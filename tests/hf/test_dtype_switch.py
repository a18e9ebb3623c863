"""A float32 snapshot never silently accepts a float16 or bfloat16 model: on real decoding, the comparison fails with
the dtype switch first on its line, unless the caller allows it, and then the values decide."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from pytest_genguard.core.compare import compare
from pytest_genguard.core.verdict import Verdict
from pytest_genguard.hf.record import record
from pytest_genguard.hf.tiny import tiny_model

PROMPTS = ["the quick brown", "once upon a time"]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_a_float32_snapshot_fails_a_half_precision_run_naming_the_switch_first(
    dtype: torch.dtype, tokenizer: Any, one_thread: None
) -> None:
    model = tiny_model("gpt2")
    snapshot = record(model, tokenizer, PROMPTS, max_new_tokens=12, top_k=5)
    now = record(tiny_model("gpt2").to(dtype), tokenizer, PROMPTS, max_new_tokens=12, top_k=5)
    name = str(dtype).removeprefix("torch.")
    cmp = compare(snapshot, now)
    assert cmp.verdict is Verdict.REGRESSION
    first = str(cmp).splitlines()[0]
    assert first.startswith(f"regression: dtype changed float32 -> {name}, judged under the looser dtype's tolerances")
    allowed = compare(snapshot, now, allow_dtype_change=True)
    assert str(allowed).splitlines()[0].startswith(f"{allowed.verdict}: dtype changed float32 -> {name}")
    assert allowed.dtype_change_allowed and cmp.dtype_change == allowed.dtype_change == ("float32", name)
    assert compare(snapshot, record(model, tokenizer, PROMPTS, max_new_tokens=12, top_k=5)).verdict is (
        Verdict.IDENTICAL
    )  # the control: the float32 model against its own snapshot
