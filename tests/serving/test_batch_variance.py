"""`moved_steps`, the rule behind the batch-variance report: every step that differs bitwise is named, a token that
moved ends the prompt's comparison (negative controls on recorded real values; no server needed)."""

from __future__ import annotations

import dataclasses
import math

from replay_server import RESPONSES

from pytest_genguard.core.trace import GenerationTrace
from pytest_genguard.serving.load import VarianceReport, moved_steps


def _trace() -> GenerationTrace:
    return GenerationTrace.from_json((RESPONSES / "snapshot.genguard").read_text(encoding="utf-8"))


def _with_step(trace: GenerationTrace, prompt: int, step: int, **changes: object) -> GenerationTrace:
    p = trace.prompts[prompt]
    steps = list(p.steps)
    steps[step] = dataclasses.replace(steps[step], **changes)  # type: ignore[arg-type]
    prompts = list(trace.prompts)
    prompts[prompt] = dataclasses.replace(p, steps=tuple(steps))
    return dataclasses.replace(trace, prompts=tuple(prompts))


def test_the_same_trace_has_no_batch_variance() -> None:
    trace = _trace()
    assert moved_steps(trace, trace, "client 0") == []
    assert VarianceReport(1, 10, ()).summary().startswith("no batch variance")


def test_a_logprob_that_moved_by_one_ulp_is_named_with_its_size() -> None:
    trace = _trace()
    step = trace.prompts[1].steps[3]
    moved = _with_step(trace, 1, 3, logprob=math.nextafter(step.logprob, 0.0))
    [found] = moved_steps(trace, moved, "client 2, round 1")
    assert (found.prompt, found.step, found.what) == (1, 3, "logprob")
    assert 0 < found.delta < 1e-6
    assert "prompt 1 step 3 logprob" in VarianceReport(8, 48, (found,)).summary()


def test_a_token_that_moved_ends_the_prompt_and_counts_as_another_token() -> None:
    trace = _trace()
    moved = _with_step(trace, 0, 2, token_id=trace.prompts[0].steps[2].token_id + 1)
    found = moved_steps(trace, moved, "client 0")
    assert [(m.step, m.what) for m in found] == [(2, "token")]
    assert "1 chose another token" in VarianceReport(1, 48, tuple(found)).summary()
