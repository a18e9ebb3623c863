"""compare() of steps with the same top-k candidates in the same order (what verify() produces on every step that
holds) takes a short walk, value against value; it counts and judges exactly as the general walk, which matches
candidates by id whatever their order."""

from __future__ import annotations

import dataclasses

from hypothesis import given, strategies as st

from pytest_genguard import strategies
from pytest_genguard.core.compare import compare
from pytest_genguard.core.tolerances import FLOAT32
from pytest_genguard.core.trace import GenerationTrace, PromptTrace, Step


def _trace(steps: list[Step]) -> GenerationTrace:
    prompt = PromptTrace(prompt="p", prompt_ids=(1, 2), steps=tuple(steps), finish_reason="length", text="")
    return GenerationTrace(prompts=(prompt,), settings={}, model=None, tokenizer=None, environment={})


@st.composite
def drifted_pairs(draw: st.DrawFn) -> tuple[list[Step], list[Step]]:
    """Steps and the same steps with their top-k values drifted (within and beyond tolerance, NaN too)."""
    expected = draw(st.lists(strategies.steps(allow_nan=True), min_size=1, max_size=6))
    actual = []
    for step in expected:
        scale = draw(st.sampled_from((0.0, 1e-7, 1e-5, 1e-2)))
        drifted = tuple(v + scale * draw(st.floats(-1, 1)) for v in step.top_logprobs)
        actual.append(dataclasses.replace(step, top_logprobs=drifted))
    return expected, actual


def _reversed_candidates(step: Step) -> Step:
    """The same candidates and values listed in another order: compared by id, the general walk."""
    return dataclasses.replace(step, top_ids=step.top_ids[::-1], top_logprobs=step.top_logprobs[::-1])


@given(pair=drifted_pairs())
def test_the_short_walk_counts_and_judges_as_the_walk_by_id(pair: tuple[list[Step], list[Step]]) -> None:
    expected, actual = pair
    short = compare(_trace(expected), _trace(actual), tolerances=FLOAT32)
    by_id = compare(_trace(expected), _trace([_reversed_candidates(s) for s in actual]), tolerances=FLOAT32)
    fields = ("compared", "exceeded", "max_abs", "mean_abs", "max_rel")
    assert [getattr(short.stats, f) for f in fields] == [getattr(by_id.stats, f) for f in fields]
    assert short.ok == by_id.ok
    assert [(d.step, d.kind) for d in short.divergences] == [(d.step, d.kind) for d in by_id.divergences]
