"""The comparison rule for one value and one split, in one place: what `compare()` (and so `verify()`, the snapshot
extension, reference traces and the engines) and a server's recording (`serving.record`) hold each value to.

A value pair (a chosen token's logprob, its processed score, a top-k logprob) agrees within
``atol + rtol * max(|a|, |b|) + lse_ulps * eps * |lse|`` (`Tolerances.allowed`), plus, for a trace normalized by a
float32 sum (a llama-server's), that sum's rounding shared by the step's logprobs. `eps` is the machine epsilon of the
coarser dtype each kind of value was computed in (logprobs, processed scores, the models' own logits: `Rule.between`)
and `|lse|` the step's log-sum-exp magnitude (`step_scale`): float rounds at the scale of the logits, not of the
logprob. At a split, two tokens are a near tie when their gap is within `tie_tol`, widened by `TIE_ULPS` ulps of the
step's logits in a bfloat16 or float16 trace (`Tolerances.near_tie`).

`Rule` holds what is fixed for a pair of traces (the tolerances and epsilons); `Rule.at` gives a step's allowances,
computed once per step (`StepRule`). Standard library only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from pytest_genguard.core.environments import LOGPROBS_FIELD, logprobs_epsilon, normalizer_bound, scores_epsilon
from pytest_genguard.core.tolerances import Tolerances, dtype_default, rounding_epsilon
from pytest_genguard.core.trace import GenerationTrace, Step

__all__ = ["Rule", "StepRule", "ValueKind", "step_scale"]

ValueKind = Literal["logprob", "score", "top"]
"""What a value is: the chosen token's raw logprob, its processed score, or a top-k logprob."""


def step_scale(e: Step, a: Step) -> float:
    """The log-sum-exp magnitude a step's rounding allowance grows with (`Tolerances.lse_ulps`): the larger of the
    two sides' `Step.lse`. A trace of pytest-genguard 0.1 has none: its |score - logprob| stands in, which is |lse|
    exactly where the score is the raw logit (decoding without processors) and of its order otherwise (0.83 |lse|
    for a confident token at temperature 1.2; about 0 for beam search, whose scores are logprobs). Values that are
    not finite count as 0."""
    known = [abs(x) for x in (e.lse, a.lse) if x is not None and math.isfinite(x)]
    if known:
        return max(known)
    estimates = [abs(s.score - s.logprob) for s in (e, a)]
    return max((x for x in estimates if math.isfinite(x)), default=0.0)


@dataclass(frozen=True)
class Rule:
    """The rule for the values of two traces: the tolerances in force, and the machine epsilon each kind of value
    is rounded with (the coarser side's).

    `logprobs`/`scores`: the dtype the logprobs (chosen and top-k) and the processed scores were computed in
    (`core.environments`: float64 logprobs since pytest-genguard 0.2, float32 scores always), or the models' own
    logits' where coarser; `model`: the logits' rounding of a bfloat16 or float16 model (`rounding_epsilon`), which
    alone widens a near tie; `normalizer`: how far a float32 sum of probabilities moves a step's logprobs together
    (`normalizer_bound`; 0 for a trace normalized as genguard does)."""

    tolerances: Tolerances
    logprobs: float = 0.0
    scores: float = 0.0
    model: float = 0.0
    normalizer: float = 0.0

    @classmethod
    def between(cls, expected: GenerationTrace, actual: GenerationTrace, tolerances: Tolerances) -> Rule:
        """The rule `compare(expected, actual)` judges by, under `tolerances`: each value is rounded in the dtype it
        was computed in, which the traces say, and all of them come from logits that a bfloat16 or float16 model
        rounded in its own dtype, the coarsest of all."""
        e, a = expected.environment, actual.environment
        model = max(rounding_epsilon(expected.dtype), rounding_epsilon(actual.dtype))
        return cls(
            tolerances,
            logprobs=max(logprobs_epsilon(e), logprobs_epsilon(a), model),
            scores=max(scores_epsilon(e), scores_epsilon(a), model),
            model=model,
            normalizer=max(normalizer_bound(e), normalizer_bound(a)),
        )

    @classmethod
    def against(cls, reference: GenerationTrace, *, computed_in: str = "float32") -> Rule:
        """The rule for a new logprob held to `reference`'s one before the new side is a whole trace (a server's,
        checked while its path is recorded): the reference dtype's default tolerances, the new logprobs rounded as
        `computed_in` (a server reports float32 logprobs). The served model's own dtype is known only once every
        logprob is in, so its logits' rounding is not counted here; `compare()` counts it."""
        return cls(dtype_default(reference.dtype), logprobs=logprobs_epsilon({LOGPROBS_FIELD: computed_in}))

    def at(self, e: Step, a: Step) -> StepRule:
        """The allowances at the step where `e` and `a` stand (its |log-sum-exp|, `step_scale`), computed once."""
        scale = step_scale(e, a)
        logprob = self.logprobs * scale
        return StepRule(
            tolerances=self.tolerances,
            logprob=logprob,
            score=self.scores * scale,
            # A normalizer summed in float32 moves the whole step's logprobs together: the top-k are judged as gaps
            # to the chosen token's logprob (logit differences, which it leaves alone), each side's two values rounded.
            top=2 * self.logprobs * scale if self.normalizer else logprob,
            shared=self.normalizer,
            gaps=bool(self.normalizer),
            tie=self.model * scale,
        )

    def holds(self, a: float, b: float, *, lse: float | None) -> bool:
        """Whether a logprob pair agrees at a step whose log-sum-exp is `lse` (None: unknown, no rounding term)."""
        return self.tolerances.close(a, b, self.logprobs * abs(lse or 0.0))


@dataclass(slots=True)  # not frozen: made once per compared step, where a frozen dataclass's __init__ costs 5x
class StepRule:
    """One step's allowances: per kind of value, its rounding term (epsilon times the step's |log-sum-exp|); the
    shift a float32 normalizer shares among the step's values (`shared`: the chosen logprob and its score carry it,
    the top-k are judged as `gaps` to the chosen logprob instead); `tie`, the rounding unit that widens a near tie
    (0 unless a model ran in bfloat16 or float16)."""

    tolerances: Tolerances
    logprob: float
    score: float
    top: float
    shared: float
    gaps: bool
    tie: float

    def allowance(self, a: float, b: float, kind: ValueKind) -> float:
        """The largest |a - b| accepted for a finite pair of values of `kind` at this step."""
        if kind == "top":
            return self.tolerances.allowed(a, b, self.top)
        return self.tolerances.allowed(a, b, self.logprob if kind == "logprob" else self.score) + self.shared

    def near_tie(self, gap: float) -> bool:
        """Whether two tokens `gap` apart at this step are a near tie (`Tolerances.near_tie`)."""
        return self.tolerances.near_tie(gap, self.tie)

    def tie_limit(self) -> float:
        """The largest gap `near_tie` accepts at this step."""
        return self.tolerances.tie_limit(self.tie)
