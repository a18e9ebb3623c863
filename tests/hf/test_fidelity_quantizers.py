"""Real quantizers against the fidelity presets: each correct quantization holds the preset of its precision, and
realistic quantization bugs fail it, on the pinned fine-tuned tiny llama (the same weights on every CPU). The
quantizers come with the ``quant`` extra (torchao, optimum-quanto; .ci/run installs it): where it is missing, their
cases skip saying so."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import quantizers as q
import torch

import pytest_genguard as gg
from pytest_genguard.core.trace import GenerationTrace

Make = Callable[[Any, Path], Any]


def on_model(convert: Callable[[Any], Any]) -> Make:
    return lambda model, folder: convert(model)


def on_folder(load: Callable[[Path], Any]) -> Make:
    return lambda model, folder: load(folder)


# (case, the preset it is judged by, the package it needs, how it is made, whether it holds)
CASES: list[tuple[str, str, str | None, Make, bool]] = [
    ("bf16 cast", "bf16", None, on_model(q.cast(torch.bfloat16)), True),
    ("fp16 cast", "fp16", None, on_model(q.cast(torch.float16)), True),
    ("torchao int8 weight-only", "int8", "torchao", on_folder(q.torchao_int8), True),
    ("optimum-quanto int8", "int8", "optimum.quanto", on_folder(q.quanto("int8")), True),
    ("optimum-quanto int4", "int4", "optimum.quanto", on_folder(q.quanto("int4")), True),
    ("round-to-nearest int8 per channel", "int8", None, on_model(q.rtn), True),
    ("round-to-nearest int4 groups of 32", "int4", None, on_model(lambda m: q.rtn(m, 4, 32)), True),
    ("torch quantize_dynamic int8 (weights and activations)", "int4", None, on_model(q.dynamic_int8), True),
    ("torch quantize_dynamic int8 is not weight-only int8", "int8", None, on_model(q.dynamic_int8), False),
    (
        "int8 with one layer's scales on the wrong axis",
        "int8",
        None,
        on_model(lambda m: q.rtn(m, 8, wrong_axis="model.layers.0.self_attn.o_proj")),
        False,
    ),
    ("int8 with the output head int4 per tensor", "int8", None, on_model(q.head_per_tensor), False),
    ("bf16 with a norm weight x1.05", "bf16", None, on_model(q.norm_off), False),
    ("fp16 with a norm weight x1.05", "fp16", None, on_model(lambda m: q.norm_off(m, dtype=torch.float16)), False),
    ("int4 with a layer skipped", "int4", None, on_model(q.skipped_layer), False),
]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, GenerationTrace, Path]:
    model = q.pinned_llama()
    return model, q.reference_trace(model), q.save(model, tmp_path_factory.mktemp("llama"))


@pytest.mark.parametrize(("case", "preset", "package", "make", "holds"), CASES, ids=[c[0] for c in CASES])
def test_each_quantization_is_judged_by_the_preset_of_its_precision(
    reference: tuple[Any, GenerationTrace, Path], case: str, preset: str, package: str | None, make: Make, holds: bool
) -> None:
    if package is not None:
        pytest.importorskip(package, reason=f"{case} needs {package}: pip install '/path/to/pytest-genguard[quant]'")
    model, trace, folder = reference
    candidate = make(model, folder)
    report = gg.fidelity(candidate, gg.tiny_tokenizer(), trace, budget=preset, reference_model=model)
    assert report.exact
    assert report.holds is holds, str(report)
    assert report.metrics["steps"] == sum(len(p.steps) for p in trace.prompts)
    if not holds:
        text = str(report)
        assert f"fidelity OUTSIDE budget {preset}:" in text
        assert "worst step: prompt" in text and "reference top-k:" in text and "candidate top-k:" in text
        # the bug is proven from the stored trace alone too: the lower bound already exceeds a limit
        assert not gg.fidelity(candidate, gg.tiny_tokenizer(), trace, budget=preset).holds


def test_the_greedy_path_alone_cannot_tell_a_broken_int8_from_a_correct_one(
    reference: tuple[Any, GenerationTrace, Path],
) -> None:
    """Why budgets judge distributions: the wrong-axis int8 keeps every greedy token (top-1 agreement 100%)."""
    model, trace, _ = reference
    broken = q.rtn(model, 8, wrong_axis="model.layers.0.self_attn.o_proj")
    report = gg.fidelity(broken, gg.tiny_tokenizer(), trace, reference_model=model)
    assert report.metrics["top1_agreement"] == 1.0 and report.metrics["flips"] == 0
    assert (
        report.metrics["kld_mean"]
        > 50 * gg.fidelity(q.rtn(model, 8), gg.tiny_tokenizer(), trace, reference_model=model).metrics["kld_mean"]
    )
