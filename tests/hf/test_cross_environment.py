"""Cross-environment comparison on CPU: the environment axes that exist without a GPU, each classified right.

A fine-tuned tiny Llama (sharp answers on the probe prompts; random init would make every axis a coin toss) is
recorded on both sides of each axis: 1 vs 2 threads, eager vs sdpa attention, solo vs batched, fp32 vs bf16, and a
rerun in the same environment. Same environment -> bitwise (`reference_tolerances` gives `compare.EXACT`); any
other axis -> the tolerant rule. fp32 vs bf16: casting the weights changes their bytes, so the weights hash
necessarily differs; compare() treats a dtype change as an environment axis (it checks the weights hash only between
traces of one dtype), so the default comparison equals one with `check_fingerprints=False`. Every bf16 divergence
is checked against an independent walk of the documented rule (first differing token -> near tie or regression at
that step; earlier values beyond tolerance -> regression at their step).
Each test prints its table (shown with `pytest -rP`).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch_threads import threads

from pytest_genguard.core.compare import compare
from pytest_genguard.core.environments import environment_differences, same_environment
from pytest_genguard.core.tolerances import BFLOAT16, EXACT, FLOAT32, TIE_ULPS, Tolerances
from pytest_genguard.core.trace import GenerationTrace, PromptTrace, Step
from pytest_genguard.core.verdict import Verdict
from pytest_genguard.hf.finetune import FineTuned
from pytest_genguard.hf.record import record
from pytest_genguard.hf.tiny import probe_prompts, tiny_model
from pytest_genguard.plugin.reference import PromptOutcome, prompt_outcomes, reference_tolerances

OFF_DISTRIBUTION = ["the lazy cat", "blue soup", "nine green", "a little", "the old book", "under the", "the fox"]
MATCHED = {"identical", "within tolerance"}


@pytest.fixture(scope="module")
def tuned(genguard_finetune: Callable[..., FineTuned]) -> FineTuned:
    return genguard_finetune("llama", pinned=False)  # no snapshot here: trained on this machine


@pytest.fixture(scope="module")
def rec(tuned: FineTuned) -> Callable[..., GenerationTrace]:
    def run(model: Any = None, prompts: list[str] | None = None, max_new_tokens: int = 12) -> GenerationTrace:
        chosen = tuned.model if model is None else model
        return record(chosen, tuned.tokenizer, prompts or probe_prompts(), max_new_tokens=max_new_tokens, top_k=5)

    return run


@pytest.fixture(scope="module")
def base(rec: Callable[..., GenerationTrace]) -> GenerationTrace:
    return rec()


def table(axis: str, outcomes: list[PromptOutcome]) -> None:
    print(f"\n{axis}")
    for o in outcomes:
        step = "" if o.step is None else f"step {o.step}"
        margin = "" if o.margin is None else f"margin {o.margin:.3g}"
        print(f"  {o.prompt!r:18} {o.outcome:32} {step:8} {margin}")


# ------------------------------------------------------------------------------------------------ the oracle


def _close(a: float, b: float, tol: Tolerances, rounding: float = 0.0) -> bool:
    allowed = tol.atol + tol.rtol * max(abs(a), abs(b)) + tol.lse_ulps * rounding
    return a == b or (math.isfinite(a) and math.isfinite(b) and abs(a - b) <= allowed)


def _rounding(e: Step, a: Step, eps: float) -> float:
    """A bf16/fp16 step's rounding unit: the model dtype's epsilon times the larger |lse| (docs/rule.md)."""
    return eps * max((abs(x) for x in (e.lse, a.lse) if x is not None and math.isfinite(x)), default=0.0)


def _values_beyond(e: Step, a: Step, tol: Tolerances, eps: float = 0.0) -> bool:
    """Whether a step where both chose the same token has a value beyond tolerance (the documented rule)."""
    r = _rounding(e, a, eps)
    if not (_close(e.logprob, a.logprob, tol, r) and _close(e.score, a.score, tol, r)):
        return True
    e_map, a_map = dict(zip(e.top_ids, e.top_logprobs, strict=True)), dict(zip(a.top_ids, a.top_logprobs, strict=True))
    for tid, lp in e_map.items():  # a token only one side lists is compared with the other side's k-th value
        if not _close(lp, a_map.get(tid, a.top_logprobs[-1]), tol, r):
            return True
    return any(not _close(e.top_logprobs[-1], lp, tol, r) for tid, lp in a_map.items() if tid not in e_map)


def _near_tie(e: Step, a: Step, tol: Tolerances, eps: float = 0.0) -> bool:
    if a.token_id not in e.top_ids or e.token_id not in a.top_ids:
        return False
    gap_e = abs(e.logprob - e.top_logprobs[e.top_ids.index(a.token_id)])
    gap_a = abs(a.logprob - a.top_logprobs[a.top_ids.index(e.token_id)])
    return max(gap_e, gap_a) <= tol.tie_tol + TIE_ULPS * _rounding(e, a, eps)


def _values(step: Step) -> tuple[Any, ...]:
    return step.token_id, step.logprob, step.score, step.top_ids, step.top_logprobs


def expected_outcome(e: PromptTrace, a: PromptTrace, tol: Tolerances, eps: float = 0.0) -> tuple[str, int | None]:
    """An independent walk of the rule: (classification, step) for one prompt; `eps` the reduced-precision model's
    logit rounding (0: float32, where the float64 logprobs' own rounding is negligible)."""
    for s, (es, as_) in enumerate(zip(e.steps, a.steps, strict=False)):
        if es.token_id != as_.token_id:
            return ("tolerated near-tie divergence" if _near_tie(es, as_, tol, eps) else "regression"), s
        if _values_beyond(es, as_, tol, eps):
            return "regression", s
    if len(e.steps) != len(a.steps) or e.finish_reason != a.finish_reason:
        n = min(len(e.steps), len(a.steps))
        return "regression", n if len(e.steps) != len(a.steps) else max(n - 1, 0)
    exact = all(_values(x) == _values(y) for x, y in zip(e.steps, a.steps, strict=True))
    return ("identical" if exact else "within tolerance"), None


# ------------------------------------------------------------------------------------------------ the axes


def test_a_rerun_in_the_same_environment_is_compared_bitwise_and_is_identical(
    base: GenerationTrace, rec: Callable[..., GenerationTrace]
) -> None:
    again = rec()
    assert same_environment(base.environment, again.environment)
    assert reference_tolerances(base, again) == EXACT
    outcomes = prompt_outcomes(compare(base, again, tolerances=EXACT))
    table("rerun, same environment (bitwise)", outcomes)
    assert {o.outcome for o in outcomes} == {"identical"}


def test_the_bitwise_rule_catches_a_one_ulp_change_that_the_tolerant_rule_accepts(base: GenerationTrace) -> None:
    p0 = base.prompts[0]
    step = p0.steps[1]
    nudged = dataclasses.replace(step, logprob=float(torch.nextafter(torch.tensor(step.logprob), torch.tensor(0.0))))
    changed = dataclasses.replace(base, prompts=(dataclasses.replace(p0, steps=(p0.steps[0], nudged, *p0.steps[2:])),))
    only_first = dataclasses.replace(base, prompts=(p0,))
    assert compare(only_first, changed, tolerances=EXACT).verdict is Verdict.REGRESSION
    assert compare(only_first, changed).verdict is Verdict.WITHIN_TOLERANCE


def test_one_thread_vs_two_threads_is_identical_or_within_tolerance(rec: Callable[..., GenerationTrace]) -> None:
    with threads(1):
        one = rec()
    with threads(2):
        two = rec()
    assert environment_differences(one.environment, two.environment) == ("num_threads",)
    tol = reference_tolerances(one, two)
    assert tol == FLOAT32
    cmp = compare(one, two, tolerances=tol)
    table("1 vs 2 threads (fp32 tolerance)", prompt_outcomes(cmp))
    assert cmp.verdict in (Verdict.IDENTICAL, Verdict.WITHIN_TOLERANCE), str(cmp)
    assert {o.outcome for o in prompt_outcomes(cmp)} <= MATCHED


def test_eager_vs_sdpa_attention_is_identical_or_within_tolerance(
    tuned: FineTuned, rec: Callable[..., GenerationTrace]
) -> None:
    traces = {}
    for impl in ("eager", "sdpa"):
        model = tiny_model("llama", attn_implementation=impl)
        model.load_state_dict(tuned.model.state_dict())
        traces[impl] = rec(model.eval())
    eager, sdpa = traces["eager"], traces["sdpa"]
    assert environment_differences(eager.environment, sdpa.environment) == ("attn_implementation",)
    cmp = compare(eager, sdpa, tolerances=reference_tolerances(eager, sdpa))
    table("eager vs sdpa attention (fp32 tolerance)", prompt_outcomes(cmp))
    assert cmp.verdict in (Verdict.IDENTICAL, Verdict.WITHIN_TOLERANCE), str(cmp)


def test_solo_vs_batched_with_left_padding_is_identical_or_within_tolerance(
    base: GenerationTrace, rec: Callable[..., GenerationTrace]
) -> None:
    outcomes = []
    for i, prompt in enumerate(base.prompts):
        solo = rec(prompts=[prompt.prompt])
        batched = dataclasses.replace(base, prompts=(prompt,))
        cmp = compare(solo, batched)
        assert cmp.verdict in (Verdict.IDENTICAL, Verdict.WITHIN_TOLERANCE), str(cmp)
        outcomes.append(dataclasses.replace(prompt_outcomes(cmp)[0], index=i))
    table("solo vs batched (fp32 tolerance)", outcomes)
    assert len({len(p.prompt_ids) for p in base.prompts}) > 1  # the batch really was padded


def test_fp32_vs_bf16_is_classified_by_the_bf16_rule_at_the_right_step(
    tuned: FineTuned, rec: Callable[..., GenerationTrace]
) -> None:
    """The bf16 cast of the fine-tuned tiny gpt2 keeps every token path here; what moves is each logit by its bf16
    rounding. The bf16 rule (values allowed `lse_ulps` ulps of the logits: docs/rule.md) calls that within tolerance,
    as the oracle's independent walk does; the same walk without the logits' rounding (the rule before it was measured
    on a real model) calls some of it a regression. Tolerated splits are classified on real bf16 data in
    tests/core/test_real_model_data.py."""
    prompts = probe_prompts() + OFF_DISTRIBUTION
    fp32 = rec(prompts=prompts, max_new_tokens=24)
    bf16 = rec(copy.deepcopy(tuned.model).to(torch.bfloat16), prompts=prompts, max_new_tokens=24)
    assert "dtype" in environment_differences(fp32.environment, bf16.environment)
    assert fp32.model is not None and bf16.model is not None
    assert fp32.model.weights_hash != bf16.model.weights_hash  # the cast changed the weights' bytes ...
    cmp = compare(fp32, bf16)  # ... which is the dtype axis, not a changed model
    assert cmp.verdict is not Verdict.STALE
    assert prompt_outcomes(cmp) == prompt_outcomes(compare(fp32, bf16, check_fingerprints=False))
    assert cmp.tolerances == BFLOAT16  # the loosest of the two dtypes' defaults
    outcomes = prompt_outcomes(cmp)
    table("fp32 vs bf16 (bf16 tolerance)", outcomes)
    for o, e, a in zip(outcomes, fp32.prompts, bf16.prompts, strict=True):
        assert (o.outcome, o.step) == expected_outcome(e, a, BFLOAT16, 2.0**-7), o.describe()
        if o.outcome == "tolerated near-tie divergence":
            step = a.steps[o.step or 0]
            limit = BFLOAT16.tie_limit(2.0**-7 * abs(step.lse or 0.0))  # the bf16 logits' rounding widens it
            assert o.gap is not None and o.gap <= limit + 1e-12
    assert any(o.outcome == "within tolerance" for o in outcomes), "the cast changed no value: nothing was judged"
    without_rounding = [expected_outcome(e, a, BFLOAT16)[0] for e, a in zip(fp32.prompts, bf16.prompts, strict=True)]
    assert "regression" in without_rounding, "the logits' bf16 rounding is what the rule accepts here"
