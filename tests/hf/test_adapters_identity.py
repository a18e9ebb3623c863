"""PEFT adapters are part of the model's identity (issue 32): the trace names them; switching or disabling one makes a
snapshot stale, naming it, never a false regression; a merged adapter against the unmerged snapshot is judged by
values, and the line says "merged"."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from invariant_support import PROBES

from pytest_genguard import GenerationTrace, compare, verify
from pytest_genguard.core.verdict import Verdict
from pytest_genguard.hf.record import record
from pytest_genguard.hf.tiny import tiny_model

peft = pytest.importorskip("peft", reason="PEFT adapters need peft: pip install -e '.[adapters]'")


def _lora(r: int, alpha: int, seed: int) -> Any:
    import torch

    torch.manual_seed(seed)  # init_lora_weights=False: random A and B, so each adapter changes the decoding
    return peft.LoraConfig(
        r=r, lora_alpha=alpha, target_modules=["c_attn"], fan_in_fan_out=True, init_lora_weights=False
    )


@pytest.fixture
def model() -> Any:
    peft_model = peft.get_peft_model(tiny_model("gpt2"), _lora(4, 8, 1), adapter_name="sft")
    peft_model.add_adapter("dpo", _lora(8, 16, 2))
    peft_model.set_adapter("sft")
    return peft_model


def _record(model: Any, tokenizer: Any) -> GenerationTrace:
    return record(model, tokenizer, PROBES[:2], max_new_tokens=6)


def _without_adapters(trace: GenerationTrace) -> GenerationTrace:
    assert trace.model is not None
    return dataclasses.replace(trace, model=dataclasses.replace(trace.model, adapters=None))


def test_the_trace_names_the_adapters_their_config_and_weights(model: Any, tokenizer: Any, one_thread: None) -> None:
    trace = _record(model, tokenizer)
    assert trace.model is not None and trace.model.adapters is not None
    adapters = trace.model.adapters
    assert adapters["loaded"] == "dpo,sft" and adapters["active"] == "sft"
    assert adapters["disabled"] is False and adapters["merged"] == ""
    assert (adapters["sft.r"], adapters["sft.lora_alpha"], adapters["sft.target_modules"]) == (4, 8, '["c_attn"]')
    assert adapters["dpo.r"] == 8 and adapters["sft.weights"] != adapters["dpo.weights"]
    assert GenerationTrace.from_json(trace.to_json()) == trace
    assert record(tiny_model("gpt2"), tokenizer, "the", max_new_tokens=1).model.adapters is None  # type: ignore[union-attr]


def test_switching_the_adapter_is_stale_naming_it_never_a_regression(
    model: Any, tokenizer: Any, one_thread: None
) -> None:
    before = _record(model, tokenizer)
    model.set_adapter("dpo")
    after = _record(model, tokenizer)
    result = compare(before, after)
    assert result.verdict is Verdict.STALE, result.render()
    assert "active adapter 'sft' (r 4, alpha 8) -> 'dpo' (r 8, alpha 16)" in result.render()
    assert "active adapter 'sft'" in verify(model, tokenizer, before, check_fingerprints=True).render()
    # Negative control: without the adapter identity the same pair reads as a regression (the false alarm it fixes).
    assert compare(_without_adapters(before), _without_adapters(after)).verdict is Verdict.REGRESSION


def test_disabling_the_adapter_is_stale_naming_it(model: Any, tokenizer: Any, one_thread: None) -> None:
    before = _record(model, tokenizer)
    with model.disable_adapter():
        disabled = _record(model, tokenizer)
    assert disabled.model is not None and disabled.model.weights_hash == before.model.weights_hash  # type: ignore[union-attr]
    result = compare(before, disabled)
    assert result.verdict is Verdict.STALE and "adapter 'sft' disabled" in result.render(), result.render()
    assert compare(_without_adapters(before), _without_adapters(disabled)).verdict is Verdict.REGRESSION
    assert compare(before, _record(model, tokenizer)).verdict is Verdict.IDENTICAL  # enabled again after the block


def test_a_merged_adapter_is_judged_by_values_and_the_line_says_merged(
    model: Any, tokenizer: Any, one_thread: None
) -> None:
    before = _record(model, tokenizer)
    model.merge_adapter()
    merged = _record(model, tokenizer)
    assert merged.model.weights_hash != before.model.weights_hash  # type: ignore[union-attr]
    result = compare(before, merged)
    assert result.verdict.ok, result.render()
    assert "adapter 'sft' merged (the snapshot's was not): judged by values" in result.render().splitlines()[0]
    # Negative control: merged, but another adapter's weights: stale, naming the weights.
    changed = {**merged.model.adapters, "sft.weights": "0" * 64}  # type: ignore[union-attr]
    other = dataclasses.replace(merged, model=dataclasses.replace(merged.model, adapters=changed))  # type: ignore[arg-type]
    text = compare(before, other).render()
    assert text.startswith("stale: model changed: ") and "adapter 'sft' weights" in text, text
