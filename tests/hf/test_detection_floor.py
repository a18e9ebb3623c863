"""The detection floor of the docs' "What it catches": per kind of change and architecture, the smallest change the
default rule catches (measured by `python -m benchmarks.detection_floor` on a grid of four steps per decade). Each
row fails at its floor, holds at a third of it, and the unchanged model is identical: the floor is where the table
says, on the pinned fine-tuned models of `fixtures/cross_kernel` (8 prompts, 24 greedy tokens, top-5)."""

from __future__ import annotations

from typing import Any

import pytest
from cross_kernel import PINS, PROMPTS
from perturb import KINDS, pinned

import pytest_genguard as gg
from pytest_genguard.core.compare import compare
from pytest_genguard.core.verdict import Verdict

FLOORS = {
    ("logit scale drift", "gpt2"): 3.16e-05,
    ("logit scale drift", "llama"): 1.78e-05,
    ("logit scale drift", "t5"): 1.78e-05,
    ("logit bias on one token", "gpt2"): 1.78e-04,
    ("logit bias on one token", "llama"): 1.78e-04,
    ("logit bias on one token", "t5"): 1.78e-04,
    ("relative noise in the output head", "gpt2"): 1.78e-05,
    ("relative noise in the output head", "llama"): 3.16e-05,
    ("relative noise in the output head", "t5"): 3.16e-05,
    ("final norm epsilon", "gpt2"): 1.78e-04,
    ("final norm epsilon", "llama"): 3.16e-06,
    ("final norm epsilon", "t5"): 5.62e-04,
}


def decode(model: Any) -> gg.GenerationTrace:
    return gg.record(model, gg.tiny_tokenizer(), PROMPTS, max_new_tokens=24, top_k=5)


@pytest.fixture(scope="module", params=["gpt2", "llama", "t5"])
def subject(request: pytest.FixtureRequest, one_thread: None) -> tuple[str, Any, gg.GenerationTrace]:
    model = pinned(request.param, PINS)
    return request.param, model, decode(model)


@pytest.mark.parametrize("kind", list(KINDS))
def test_each_kind_of_change_is_caught_from_its_floor(kind: str, subject: tuple[str, Any, gg.GenerationTrace]) -> None:
    arch, model, base = subject
    floor = FLOORS[kind, arch]
    assert compare(base, decode(model)).verdict is Verdict.IDENTICAL  # without the change (and the change undone)
    with KINDS[kind](model, floor):
        at_floor = decode(model)
    with KINDS[kind](model, floor / 3):
        below = decode(model)
    cmp = compare(base, at_floor)
    assert cmp.verdict is Verdict.REGRESSION, str(cmp).splitlines()[0]
    held = compare(base, below)
    assert held, str(held).splitlines()[0]
