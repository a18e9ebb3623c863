"""The comparison rule: is a new `GenerationTrace` the same decoding behaviour as a recorded one?

The rule combines what vLLM, Hugging Face and TGI learned (see DESIGN.md, "Divergence rule"):

- token ids must match exactly, step by step (and one id must decode to the same token text);
- where they match, the chosen token's raw logprob, its processed score and the raw top-k (as a map id -> logprob)
  must agree within ``atol + rtol * max(|a|, |b|)``; a token in only one side's top-k is fine when its logprob is within
  that tolerance of the other side's k-th value (it just crossed the edge of the list); NaN equals NaN, inf equals inf;
- at the first differing token id the paths split: a *near tie* (each side's token in the other's top-k and both
  logprob gaps, taken as magnitudes, at most ``tie_tol``) is a tolerated divergence, anything else a regression;
  nothing after the split is compared;
- different lengths or finish reasons over an agreeing path, or the same prompt text tokenized to different ids, are
  regressions;
- a changed model, tokenizer, decoding settings or prompt list makes the recorded trace *stale*, not regressed
  (`check_fingerprints` narrows which fingerprints count: `Fingerprints`);
- traces of two dtypes (float32 recorded, float16 now) are judged under the looser dtype's tolerances, and fail
  whatever the values unless the caller passes ``allow_dtype_change=True``: a precision switch is never silent.

Every part is symmetric (``compare(a, b)`` and ``compare(b, a)`` give the same verdict) and monotone in the
tolerances (a pass stays a pass under looser ones); the tests check both as properties. `PromptTrace.text` (the
decoded text) is derived from the ids and not compared.

Pure standard library: `import pytest_genguard.core.compare` never imports torch. This module walks the traces; what
one value or one split is held to (the allowance with its rounding term, the near-tie rule) is
`pytest_genguard.core.rule`, the tolerances `pytest_genguard.core.tolerances`, the result (`Comparison`) and its
explanation `pytest_genguard.core.comparison`, what makes a trace stale `pytest_genguard.core.staleness`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Unpack

from pytest_genguard.core.adapters import merge_note
from pytest_genguard.core.comparison import Comparison
from pytest_genguard.core.environments import environment_diff
from pytest_genguard.core.rule import Rule, StepRule, ValueKind
from pytest_genguard.core.staleness import Fingerprints, fingerprints_option, stale_reasons
from pytest_genguard.core.tolerances import ToleranceArgs, default_tolerances, dtype_change, resolve, same
from pytest_genguard.core.trace import GenerationTrace, PromptTrace, Step
from pytest_genguard.core.verdict import Divergence, DivergenceKind, ErrorStats, Verdict, worst

__all__ = ["Fingerprints", "compare"]


class _Stats:
    """Mutable accumulator behind `ErrorStats`."""

    def __init__(self) -> None:
        self.compared = 0
        self.exceeded = 0
        self.sum_abs = 0.0
        self.max_abs = 0.0
        self.max_rel = 0.0
        self.worst: tuple[int, int, str] | None = None
        self.max_share = 0.0
        self.share_at: tuple[int, int, str] | None = None

    def freeze(self) -> ErrorStats:
        mean = self.sum_abs / self.compared if self.compared else 0.0
        return ErrorStats(
            self.compared,
            self.exceeded,
            self.max_abs,
            mean,
            self.max_rel,
            _at(self.worst),
            self.max_share,
            _at(self.share_at),
        )


def _at(where: tuple[int, int, str] | None) -> str | None:
    return None if where is None else f"prompt {where[0]} step {where[1]} {where[2]}"


@dataclass
class _PromptRun:
    """State of one prompt's walk."""

    index: int
    stats: _Stats
    differs: bool = False  # some compared value or the top-k order is not bitwise equal
    failure: tuple[DivergenceKind, str] | None = None  # first value beyond tolerance in the current step

    def check(
        self,
        rule: StepRule,
        value: ValueKind,
        a: float,
        b: float,
        step: int,
        where: str,
        kind: DivergenceKind,
        label: str,
    ) -> None:
        """Compare one value pair under the step's rule, record statistics and the step's first failure."""
        st = self.stats
        st.compared += 1
        if same(a, b):
            return
        self.differs = True
        finite = math.isfinite(a) and math.isfinite(b)
        # Not equal and not both finite (NaN vs number, inf vs number): an infinite error, never within tolerance.
        diff = abs(a - b) if finite else math.inf
        allowed = rule.allowance(a, b, value) if finite else 0.0
        scale = max(abs(a), abs(b)) if finite else math.inf
        st.sum_abs += diff
        st.max_rel = max(st.max_rel, diff / scale if finite else math.inf)
        if st.worst is None or diff > st.max_abs:
            st.max_abs = max(st.max_abs, diff)
            st.worst = (self.index, step, where)
        share = diff / allowed if allowed > 0 else math.inf
        if st.share_at is None or share > st.max_share:
            st.max_share, st.share_at = share, (self.index, step, where)
        if not diff <= allowed:
            st.exceeded += 1
            if self.failure is None:
                why = f"|diff| {diff:.2g} > tol {allowed:.2g}" if finite else _not_finite(a, b)
                self.failure = (kind, f"{label} {_pair(a, b)} ({why})")


def _not_finite(a: float, b: float) -> str:
    """Which side holds NaN or inf (a recorded one was refused when stored: the file was edited or damaged)."""
    sides = [side for side, v in (("expected", a), ("actual", b)) if not math.isfinite(v)]
    return f"the {sides[0]} value is not a finite number" if len(sides) == 1 else "neither value is a finite number"


def _pair(a: float, b: float) -> str:
    """Both values with just enough digits to tell them apart."""
    for digits in range(4, 10):
        left, right = f"{a:.{digits}g}", f"{b:.{digits}g}"
        if left != right:
            break
    return f"{left} vs {right}"


def _check_step(run: _PromptRun, rule: StepRule, s: int, e: Step, a: Step) -> None:
    """Compare the values of a step where both sides chose the same token, under the step's rule."""
    run.check(rule, "logprob", e.logprob, a.logprob, s, "logprob", "logprob", "logprob")
    run.check(rule, "score", e.score, a.score, s, "score", "logprob", "score")
    if rule.gaps:  # the top-k judged as gaps to the chosen token's logprob (a float32 normalizer's shared shift)
        e, a = _gaps(e), _gaps(a)
    gap = " - logprob" if rule.gaps else ""  # how a failing top-k value is named
    if e.top_ids != a.top_ids:
        run.differs = True
    if len(e.top_ids) != len(a.top_ids):
        run.differs = True
        run.stats.compared += 1
        run.stats.exceeded += 1
        if run.failure is None:
            run.failure = ("topk", f"top-k size {len(e.top_ids)} vs {len(a.top_ids)}")
        return
    if e.top_ids == a.top_ids and len(set(e.top_ids)) == len(e.top_ids):
        # The usual case, the same candidates in the same order: each value against its own, and labels only for
        # values that differ (what the general walk below does, without its two dicts and a label per value).
        for rank, (lp, alp) in enumerate(zip(e.top_logprobs, a.top_logprobs, strict=False)):
            if lp == alp:
                run.stats.compared += 1
            else:
                label = f"top_logprobs[{rank}]{gap} (id {e.top_ids[rank]})"
                run.check(rule, "top", lp, alp, s, f"top_logprobs[{rank}]", "topk", label)
        return
    e_map = dict(zip(e.top_ids, e.top_logprobs, strict=False))
    a_map = dict(zip(a.top_ids, a.top_logprobs, strict=False))
    for rank, (tid, lp) in enumerate(zip(e.top_ids, e.top_logprobs, strict=False)):
        if tid in a_map:
            label = f"top_logprobs[{rank}]{gap} (id {tid})"
            run.check(rule, "top", lp, a_map[tid], s, f"top_logprobs[{rank}]", "topk", label)
        else:
            label = f"id {tid} left the top-{len(a.top_ids)}: its logprob{gap} vs the new k-th value{gap}:"
            run.check(rule, "top", lp, a.top_logprobs[-1], s, f"top_logprobs[{rank}]", "topk", label)
    for rank, (tid, lp) in enumerate(zip(a.top_ids, a.top_logprobs, strict=False)):
        if tid not in e_map:
            label = f"id {tid} entered the top-{len(e.top_ids)}: the old k-th value{gap} vs its logprob{gap}:"
            run.check(rule, "top", e.top_logprobs[-1], lp, s, f"new top_logprobs[{rank}]", "topk", label)


def _gaps(step: Step) -> Step:
    """`step` with its top-k logprobs as gaps to its chosen token's logprob (labelled so where a value fails)."""
    return dataclasses.replace(step, top_logprobs=tuple(lp - step.logprob for lp in step.top_logprobs))


def _split(i: int, p: PromptTrace, s: int, e: Step, a: Step, rule: StepRule) -> Divergence:
    """The divergence at the first differing token id: a near tie (tolerated, `StepRule.near_tie`) or a
    regression."""
    e_rank_in_a = a.rank_of(e.token_id)
    a_rank_in_e = e.rank_of(a.token_id)
    gap: float | None = None
    if e_rank_in_a is not None and a_rank_in_e is not None:
        gap_e = e.logprob - e.top_logprobs[a_rank_in_e]
        gap_a = a.logprob - a.top_logprobs[e_rank_in_a]
        # Magnitudes: with sampling or processors the chosen token need not lead in raw logprob, and a near tie is
        # about closeness either way. NaN poisons the gap explicitly (max() with NaN depends on argument order).
        gap = math.nan if math.isnan(gap_e) or math.isnan(gap_a) else max(abs(gap_e), abs(gap_a))
    tolerated = gap is not None and rule.near_tie(gap)
    if gap is None:
        missing = []
        if e_rank_in_a is None:
            missing.append(f"expected id {e.token_id} not in the new top-{len(a.top_ids)}")
        if a_rank_in_e is None:
            missing.append(f"actual id {a.token_id} not in the old top-{len(e.top_ids)}")
        detail = "; ".join(missing)
    else:
        relation = "<=" if tolerated else ">"
        limit = f"tie_tol {rule.tolerances.tie_tol:g}" if not rule.tie else f"tie limit {rule.tie_limit():.2g}"
        detail = f"gap {gap:.2g} {relation} {limit}"
    return _divergence(i, p, s, "token", e, a, detail, gap=gap, tolerated=tolerated)


def _divergence(
    i: int,
    p: PromptTrace,
    s: int,
    kind: DivergenceKind,
    e: Step | None,
    a: Step | None,
    detail: str,
    *,
    gap: float | None = None,
    tolerated: bool = False,
) -> Divergence:
    return Divergence(
        prompt_index=i,
        prompt=p.prompt,
        step=s,
        kind=kind,
        expected_token_id=e.token_id if e else None,
        actual_token_id=a.token_id if a else None,
        expected_token=e.token if e else None,
        actual_token=a.token if a else None,
        expected_logprob=e.logprob if e else None,
        actual_logprob=a.logprob if a else None,
        expected_rank_in_actual=a.rank_of(e.token_id) if e and a else None,
        actual_rank_in_expected=e.rank_of(a.token_id) if e and a else None,
        expected_margin=e.margin if e else None,
        actual_margin=a.margin if a else None,
        gap=gap,
        detail=detail,
        tolerated=tolerated,
    )


def _compare_prompt(
    i: int, e: PromptTrace, a: PromptTrace, rule: Rule, stats: _Stats
) -> tuple[Verdict, Divergence | None]:
    """Walk one prompt's common prefix; return its verdict and its first divergence."""
    if e.prompt_ids != a.prompt_ids:
        detail = f"prompt_ids {_ids(e.prompt_ids)} vs {_ids(a.prompt_ids)}"
        return Verdict.REGRESSION, _divergence(i, e, 0, "prompt", None, None, detail)
    run = _PromptRun(i, stats)
    n = min(len(e.steps), len(a.steps))
    for s in range(n):
        es, as_ = e.steps[s], a.steps[s]
        step_rule = rule.at(es, as_)
        if es.token_id != as_.token_id:
            div = _split(i, e, s, es, as_, step_rule)
            return div.verdict, div
        if es.token != as_.token:
            detail = f"id {es.token_id} decodes differently (the tokenizer's decoding changed)"
            return Verdict.REGRESSION, _divergence(i, e, s, "token", es, as_, detail)
        _check_step(run, step_rule, s, es, as_)
        if run.failure is not None:
            kind, detail = run.failure
            return Verdict.REGRESSION, _divergence(i, e, s, kind, es, as_, detail)
    if len(e.steps) != len(a.steps):
        e_next = e.steps[n] if n < len(e.steps) else None
        a_next = a.steps[n] if n < len(a.steps) else None
        detail = f"{len(e.steps)} vs {len(a.steps)} tokens ({_finish(e)} vs {_finish(a)})"
        return Verdict.REGRESSION, _divergence(i, e, n, "length", e_next, a_next, detail)
    if e.finish_reason != a.finish_reason:
        last = max(n - 1, 0)
        e_last = e.steps[last] if n else None
        a_last = a.steps[last] if n else None
        detail = f"finish_reason {e.finish_reason!r} vs {a.finish_reason!r}"
        return Verdict.REGRESSION, _divergence(i, e, last, "finish_reason", e_last, a_last, detail)
    return (Verdict.WITHIN_TOLERANCE if run.differs else Verdict.IDENTICAL), None


def _finish(p: PromptTrace) -> str:
    return f"finish {p.finish_reason!r}"


def _ids(ids: tuple[int, ...], limit: int = 8) -> str:
    shown = ", ".join(str(x) for x in ids[:limit])
    return f"[{shown}{', ...' if len(ids) > limit else ''}]"


def compare(
    expected: GenerationTrace,
    actual: GenerationTrace,
    *,
    check_fingerprints: bool | Fingerprints = True,
    **tolerances: Unpack[ToleranceArgs],
) -> Comparison:
    """Compare a new trace with a recorded one under the divergence rule (see the module docstring).

    Tolerances default to `tolerances_for()` of the traces' dtype (the loosest of the two when they differ), or to
    `tolerances=`; `atol=`/`rtol=`/`tie_tol=` override single fields. `check_fingerprints=False` ignores model and
    tokenizer fingerprints (to compare two models on purpose), `Fingerprints.TOKENIZER` holds the traces to their
    tokenizer and chat template alone (a cast or quantized copy, judged over the same tokens);
    `allow_dtype_change=True` lets traces of two dtypes pass on their values (they fail otherwise). Never raises on
    valid traces.
    """
    for name, value in (("expected", expected), ("actual", actual)):
        if not isinstance(value, GenerationTrace):
            raise TypeError(f"compare: {name} must be a GenerationTrace, got {type(value).__name__}")
    fingerprints = fingerprints_option(check_fingerprints)
    tol = resolve(default_tolerances(expected, actual), tolerances)
    rule = Rule.between(expected, actual, tol)
    stats = _Stats()
    divergences: list[Divergence] = []
    verdicts: list[Verdict | None] = []
    for i, (e, a) in enumerate(zip(expected.prompts, actual.prompts, strict=False)):
        if e.prompt != a.prompt:
            verdicts.append(None)
            continue
        verdict, div = _compare_prompt(i, e, a, rule, stats)
        verdicts.append(verdict)
        if div is not None:
            divergences.append(div)
    verdicts += [None] * (max(len(expected.prompts), len(actual.prompts)) - len(verdicts))
    stale = stale_reasons(expected, actual, fingerprints)
    overall = Verdict.STALE if stale else worst(v for v in verdicts if v is not None)
    dtypes = dtype_change(expected, actual)
    allowed = bool(tolerances.get("allow_dtype_change"))
    values_verdict = None
    if dtypes is not None and not allowed and overall.ok:
        values_verdict, overall = overall, Verdict.REGRESSION  # the values may hold; the switch itself fails
    return Comparison(
        verdict=overall,
        tolerances=tol,
        divergences=tuple(divergences),
        stale_reasons=stale,
        environment_diff=environment_diff(expected.environment, actual.environment),
        stats=stats.freeze(),
        expected=expected,
        actual=actual,
        prompt_verdicts=tuple(verdicts),
        dtype_change=dtypes,
        dtype_change_allowed=allowed,
        values_verdict=values_verdict,
        adapter_note=(
            merge_note(expected.model.adapters, actual.model.adapters)
            if fingerprints is Fingerprints.ALL and expected.model is not None and actual.model is not None
            else None
        ),
    )
