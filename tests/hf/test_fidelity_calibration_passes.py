"""`calibrate()` teacher forces each reference copy once: the exact figures and the lower bounds come from the same
forced logits (it forced each copy twice, once per kind of figure), and the figures are what two passes gave."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import quantizers
import torch

import pytest_genguard as gg
from pytest_genguard.core.fidelity import aggregate
from pytest_genguard.hf import fidelity as fidelity_module
from pytest_genguard.hf.reference_copies import reference_copy

PRECISIONS = ("bf16", "int8")


@pytest.fixture(scope="module")
def reference() -> tuple[Any, Any, gg.GenerationTrace]:
    model = quantizers.pinned_llama()
    return model, gg.tiny_tokenizer(), quantizers.reference_trace(model)


def counted_passes(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The models `hf.fidelity` teacher forces from now on, one entry per forward pass."""
    forced: list[Any] = []
    real = fidelity_module.forced_logits

    def counting(forced_model: Any, *args: Any) -> Any:
        forced.append(forced_model)
        return real(forced_model, *args)

    monkeypatch.setattr(fidelity_module, "forced_logits", counting)
    return forced


def test_each_reference_copy_is_teacher_forced_once(
    reference: tuple[Any, Any, gg.GenerationTrace], monkeypatch: pytest.MonkeyPatch
) -> None:
    model, tokenizer, trace = reference
    forced = counted_passes(monkeypatch)
    figures = fidelity_module.calibration_figures(model, tokenizer, trace, PRECISIONS)

    copies = [m for m in forced if m is not model]
    assert len(copies) == len(PRECISIONS), f"{len(copies)} teacher-forced passes of {len(PRECISIONS)} copies"
    assert len({id(m) for m in copies}) == len(PRECISIONS)  # each copy once
    assert {f"{p}.bound.kld_mean" for p in PRECISIONS} <= set(figures)  # ... and the lower bounds are there


def test_the_figures_are_those_of_a_pass_per_kind(reference: tuple[Any, Any, gg.GenerationTrace]) -> None:
    # The exact figures and the bounds from one forced pass equal those of two separate passes (as before).
    model, tokenizer, trace = reference
    figures = fidelity_module.calibration_figures(model, tokenizer, trace, PRECISIONS)
    for precision in PRECISIONS:
        copy = reference_copy(model, precision)
        exact = aggregate(fidelity_module.fidelity_steps(copy, tokenizer, trace, reference_model=model))
        bound = aggregate(fidelity_module.fidelity_steps(copy, tokenizer, trace))
        assert figures[f"{precision}.kld_mean"] == pytest.approx(float(exact["kld_mean"]), rel=0, abs=0)
        assert figures[f"{precision}.bound.kld_mean"] == pytest.approx(float(bound["kld_mean"]), rel=0, abs=0)
        assert figures[f"{precision}.bound.kld_mean"] <= figures[f"{precision}.kld_mean"]


def test_the_reference_model_is_forced_once_per_state(
    reference: tuple[Any, Any, gg.GenerationTrace], monkeypatch: pytest.MonkeyPatch
) -> None:
    # calibrate() and every fidelity(reference_model=) against one reference read one reference side (it was forced
    # once per precision and once per candidate); an edit of the reference model's weights forces it again.
    model, tokenizer, trace = reference
    model = copy.deepcopy(model)  # a model no other test has forced
    forced = counted_passes(monkeypatch)
    fidelity_module.calibration_figures(model, tokenizer, trace, PRECISIONS)
    candidate = reference_copy(model, "bf16")
    first = gg.fidelity(candidate, tokenizer, trace, reference_model=model, probe=False)
    assert sum(m is model for m in forced) == 1, f"the reference model was forced {sum(m is model for m in forced)}x"

    with torch.no_grad():
        model.lm_head.weight.mul_(1.01)  # the same model object, another state
    again = gg.fidelity(candidate, tokenizer, trace, reference_model=model, probe=False)
    assert sum(m is model for m in forced) == 2
    assert again.metrics["kld_mean"] != first.metrics["kld_mean"]  # judged against the edited weights
