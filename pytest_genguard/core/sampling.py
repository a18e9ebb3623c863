"""The rule for distributions after truncation: a sampled step's support (what the processors kept) and its processed
probabilities, judged against another sampler's (a server's post-sampling distribution along the snapshot's path).
Standard library only.

A sampled snapshot cannot be replayed on a server (another RNG), but what each step sampled *from* can be compared:
`record()` stores per sampled step how many tokens its processors kept and the processed probability of each top-k
token (`trace.Support`). The rule derives from the logprob rule's own allowance (`Tolerances`), carried through the
sampler:

- a processed logprob is ``(logit + penalty) / T`` minus the log-sum-exp over the kept tokens. Its gap to the step's
  most probable token is a raw logit gap divided by `T` (times at most the repetition penalty): it may move by the raw
  rule's allowance of that gap, ``atol + rtol * T * |gap|``, over `T`. The normalizer is a probability-weighted mean of
  those gaps; its mean gap is at most ``log p_max + log kept`` (the entropy of `kept` tokens is at most
  ``log kept``), so it may move by the allowance of that gap over `T`. Add the rounding of the sampler's float32 logits
  at the scale of the step's log-sum-exp (``lse_ulps * eps * |lse| / T``, the raw rule's term) and of the two stored
  float32 probabilities: that is how far a probability's log may move (`probability_bound`);
- the support is the same up to tokens within float error of a threshold (`Support.low`/`high`, computed when
  recording from `band_slack`): a top-p cut moves by the cumulative mass's allowance (its tokens' bound, plus one
  float32 rounding of each of the vocabulary's terms in the sums the cut is taken on), a min-p cut by the bound of the
  gap ``log min_p``. A support outside that range is a different sampler (near-threshold tokens are tolerated, as near
  ties are);
- a server whose support cannot be seen (it returns fewer tokens than the snapshot kept) is *unproven* there, never
  within.

Which sampler a server runs is its mapping's business (`pytest_genguard.serving`): this module judges distributions
and says what differed; the mapping names the cause (a sampler order, a penalty window) and its fix.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from pytest_genguard.core.jsontext import JSONScalar
from pytest_genguard.core.tolerances import LSE_ULPS, Tolerances
from pytest_genguard.core.trace import CHAT_SETTING, GenerationTrace, Step, Support

__all__ = [
    "DISTRIBUTION_NEUTRAL",
    "Cause",
    "SamplerReport",
    "SamplerSettings",
    "Served",
    "StepJudgement",
    "band_slack",
    "judge_step",
    "judgeable",
    "probability_bound",
    "step_sequence",
]

_F32 = 2.0**-23
_HALF_ULP = 2.0**-24

DISTRIBUTION_NEUTRAL = frozenset(
    {
        "max_new_tokens",
        "do_sample",
        "num_beams",
        "use_cache",
        "mode",
        "eos_token_id",
        "record_top_k",
        "seed",
        "length_penalty",
        "early_stopping",
        "stop_strings",
        "max_time",
        "cache_implementation",
        CHAT_SETTING,
    }
)
"""Settings that never change what a step samples from (how long, when to stop, how it was recorded, how the prompts
were made); any other setting outside the mapped ones leaves the sampler unjudged (`SamplerSettings.unmapped`)."""

_MAPPED = ("temperature", "top_k", "top_p", "min_p", "typical_p", "repetition_penalty")
_TRANSFORMERS_TOP_K = 50  # generate()'s default top-k when a sampling config sets none (the trace stores None)


@dataclass(frozen=True)
class SamplerSettings:
    """A sampled trace's sampler as transformers applied it: repetition penalty, then temperature, top-k, top-p,
    min-p, typical-p (`GenerationMixin._get_logits_processor`'s order). `unmapped` names the settings that shape the
    distribution but that no server field maps (custom processors, bad words, n-gram bans...)."""

    temperature: float = 1.0
    top_k: int = 0  # 0: off
    top_p: float = 1.0
    min_p: float = 0.0  # 0: off
    typical_p: float = 1.0
    repetition_penalty: float = 1.0
    unmapped: tuple[str, ...] = ()

    @classmethod
    def of(cls, settings: Mapping[str, JSONScalar]) -> SamplerSettings | None:
        """The sampler of a trace's `settings`; None when it does not sample (greedy, beam search)."""
        if settings.get("do_sample") is not True or settings.get("num_beams") not in (None, 1):
            return None
        known = {key: settings.get(key) for key in _MAPPED}
        top_k = known["top_k"]
        unmapped = tuple(
            sorted(k for k, v in settings.items() if v is not None and k not in DISTRIBUTION_NEUTRAL | set(_MAPPED))
        )
        return cls(
            temperature=_number(known["temperature"], 1.0),
            top_k=_TRANSFORMERS_TOP_K if top_k is None else int(_number(top_k, 0)),
            top_p=_number(known["top_p"], 1.0),
            min_p=_number(known["min_p"], 0.0),
            typical_p=_number(known["typical_p"], 1.0),
            repetition_penalty=_number(known["repetition_penalty"], 1.0),
            unmapped=unmapped,
        )

    @property
    def truncates(self) -> bool:
        """Whether a processor removes tokens (top-k, top-p, min-p, typical-p)."""
        return self.top_k > 0 or self.top_p < 1.0 or self.min_p > 0.0 or self.typical_p < 1.0

    @property
    def penalty_scale(self) -> float:
        """How much the repetition penalty can scale a logit's drift (a negative logit is multiplied by it)."""
        return max(self.repetition_penalty, 1.0)

    def describe(self) -> str:
        """``temperature 1.5, top_p 0.9``: the active settings, for messages."""
        active = {
            "repetition_penalty": self.repetition_penalty != 1.0,
            "temperature": self.temperature != 1.0,
            "top_k": self.top_k > 0,
            "top_p": self.top_p < 1.0,
            "min_p": self.min_p > 0.0,
            "typical_p": self.typical_p < 1.0,
        }
        parts = [f"{key} {getattr(self, key):g}" for key, on in active.items() if on]
        return ", ".join(parts) or "temperature 1 (no processor)"


def _number(value: JSONScalar, default: float) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def _allowance(tol: Tolerances, gap: float) -> float:
    """The raw rule's allowance of a logit gap of magnitude `gap` (`Tolerances.allowed`, no rounding term)."""
    return tol.atol + tol.rtol * abs(gap)


def _rounding(tol: Tolerances, lse: float | None, temperature: float) -> float:
    """The sampler's float32 rounding of a processed logprob: `lse_ulps` float32 epsilons at the scale of the step's
    logits (its log-sum-exp), divided by the temperature; the same count as the raw rule's (`LSE_ULPS`)."""
    ulps = tol.lse_ulps or LSE_ULPS
    return ulps * _F32 * abs(lse or 0.0) / temperature


def probability_bound(
    tol: Tolerances, sampler: SamplerSettings, gap: float, mean_gap: float, lse: float | None
) -> float:
    """How far the log of a processed probability may move: its gap to the most probable token (`gap`, a processed
    logprob difference) and the normalizer's mean gap (`mean_gap`) each by the raw rule's allowance of the raw logit
    gap (`T` times the processed one) over `T`, scaled by the repetition penalty; plus the float32 rounding of the
    logits and of the two stored probabilities."""
    t = sampler.temperature
    drift = (_allowance(tol, t * gap) + _allowance(tol, t * mean_gap)) * sampler.penalty_scale / t
    return drift + _rounding(tol, lse, t) + 2 * _HALF_ULP


def _mean_gap(p_max: float, kept: int) -> float:
    """An upper bound of the probability-weighted mean gap to the top token, ``log p_max + H``, with the entropy H of
    `kept` tokens at most ``log kept``."""
    return max(0.0, math.log(p_max) + math.log(max(kept, 1))) if p_max > 0 else 0.0


def band_slack(
    tol: Tolerances,
    sampler: SamplerSettings,
    *,
    cut_gap: float,
    p_max: float,
    kept: int,
    lse: float | None,
    vocab: int,
) -> tuple[float, float]:
    """How far a step's thresholds may move within float error, for recording its near-threshold range: (the top-p
    cut's cumulative mass: the bound of its tokens' probabilities, `cut_gap` being the smallest kept token's gap to the
    top, times `top_p`, plus one float32 rounding of each of `vocab` terms of the sums the cut is taken on; the min-p
    cut's log: the bound of the gap ``log min_p``, whose normalizer cancels)."""
    mean = _mean_gap(p_max, kept)
    mass = sampler.top_p * probability_bound(tol, sampler, cut_gap, mean, lse) + vocab * _HALF_ULP
    log_min_p = abs(math.log(sampler.min_p)) if sampler.min_p > 0 else 0.0
    t = sampler.temperature
    relative = _allowance(tol, t * log_min_p) * sampler.penalty_scale / t + _rounding(tol, lse, t) + 2 * _HALF_ULP
    return mass, relative


@dataclass(frozen=True)
class Served:
    """A sampler's distribution at one step: (token id, probability) best first, and whether the list holds its
    whole support (`complete`: it returned fewer than asked, or as many as the vocabulary)."""

    entries: tuple[tuple[int, float], ...]
    complete: bool

    @property
    def kept(self) -> int | None:
        """How many tokens it kept (None: more than it returned)."""
        return len(self.entries) if self.complete else None


def _normalizer_shift(support: Support, served: Served) -> float:
    """How far a tolerated support difference moves every probability's log: the kept tokens renormalize over the
    mass of the tokens kept on one side only (near-threshold tokens, the least probable). Served beyond the recorded
    count: their served mass; recorded beyond the served count: at most the served least probability each. 0 where
    the supports agree or the served one is not seen whole (then it is outside or unproven anyway)."""
    n = served.kept
    if n is None or n == support.kept or not support.low <= n <= support.high or not served.entries:
        return 0.0
    extra = sum(q for _, q in served.entries[support.kept :])
    missing = max(0, support.kept - n) * served.entries[-1][1]
    return -math.log1p(-min(0.5, extra + missing))


@dataclass(frozen=True)
class StepJudgement:
    """One sampled step judged: within, outside or unproven, and what decided it."""

    prompt: int
    step: int
    status: str  # "within", "outside", "unproven"
    kept: int  # the snapshot's
    low: int
    high: int
    served_kept: int | None  # None: more than `asked`
    asked: int
    max_abs: float  # the largest |difference| of a probability judged
    share: float  # the largest |log difference| / its bound (1.0: the edge)
    where: str  # the token of the worst share
    reason: str = ""  # why it is outside or unproven

    @property
    def support_text(self) -> str:
        """``kept 2584 (2570-2599 within float error), served 2580``."""
        band = "" if self.low == self.high else f" ({self.low}-{self.high} within float error)"
        served = f"at least {self.asked}" if self.served_kept is None else str(self.served_kept)
        return f"kept {self.kept}{band}, served {served}"


def judge_step(
    step: Step, served: Served, sampler: SamplerSettings, tol: Tolerances, *, prompt: int, index: int, asked: int
) -> StepJudgement:
    """`step`'s recorded support and processed probabilities against `served`, by the rule of this module."""
    support = step.support
    if support is None:
        raise ValueError(f"prompt {prompt} step {index}: the step has no recorded support (a greedy or older trace)")
    got = dict(served.entries)
    floor = served.entries[-1][1] if served.entries else 0.0
    p_max = max(support.probs, default=0.0)
    mean = _mean_gap(p_max, support.kept)
    shift = _normalizer_shift(support, served)
    worst_share, worst_abs, worst_at, failure, unseen = 0.0, 0.0, "no probability compared", "", ""
    for token_id, p in zip(step.top_ids, support.probs, strict=True):
        if p <= 0.0:
            continue  # removed when recording: a support question
        bound = probability_bound(tol, sampler, math.log(p_max / p), mean, step.lse) + shift
        q = got.get(token_id)
        if q is None and not served.complete:
            if math.log(p) - math.log(floor or p) > bound:
                failure = failure or f"id {token_id}: recorded {p:.4g}, served below {floor:.4g} (not in its top)"
            else:
                unseen = unseen or f"id {token_id} (recorded {p:.4g}) is below the served top-{len(served.entries)}"
            continue
        if not q:
            continue  # kept here, removed there: a support question
        share = abs(math.log(q) - math.log(p)) / bound
        if share > worst_share:
            worst_share, worst_at = share, f"id {token_id}"
        worst_abs = max(worst_abs, abs(q - p))
        if share > 1.0 and not failure:
            failure = f"id {token_id}: probability {q:.4g} served, {p:.4g} recorded ({share:.3g}x the bound of its log)"
    judged = StepJudgement(
        prompt,
        index,
        "within",
        support.kept,
        support.low,
        support.high,
        served.kept,
        asked,
        worst_abs,
        worst_share,
        worst_at,
    )
    n = served.kept
    if n is not None and not support.low <= n <= support.high:
        return replace(judged, status="outside", reason=f"support: {judged.support_text}")
    if n is None and support.high < asked:
        reason = f"support: served at least {asked} tokens, recorded at most {support.high}"
        return replace(judged, status="outside", reason=reason)
    if failure:
        return replace(judged, status="outside", reason=failure)
    if n is None:
        reason = f"support not seen: the server returned its top-{len(served.entries)}, recorded at least {support.low}"
        return replace(judged, status="unproven", reason=reason)
    if unseen:
        return replace(judged, status="unproven", reason=unseen)
    return judged


@dataclass(frozen=True)
class Cause:
    """Why a server's sampler differs from transformers', and the fix: named by the server's mapping, `proven` when a
    request with the fix was within at the step that differed (else: known from the settings alone)."""

    name: str  # "sampler order"
    explanation: str
    fix: str
    proven: bool = False

    def text(self) -> str:
        how = "shown: the fixed request is within" if self.proven else "known from the settings"
        return f"{self.name}: {self.explanation}; {self.fix} ({how})"


@dataclass(frozen=True)
class SamplerReport:
    """A sampled snapshot's steps judged against a server's sampler, the request fields it was sent (`sent`, one
    step's, without the prompt), the alignments applied, and the causes named for what differed."""

    steps: tuple[StepJudgement, ...] = ()
    sent: Mapping[str, JSONScalar] = field(default_factory=dict)
    aligned: tuple[str, ...] = ()
    causes: tuple[Cause, ...] = ()
    not_judged: str | None = None  # why the sampler could not be judged at all (unproven)

    @property
    def status(self) -> str:
        """ "outside" when a step is, else "unproven" when one (or the whole) could not be proven, else "within"."""
        statuses = {s.status for s in self.steps}
        if "outside" in statuses:
            return "outside"
        if self.not_judged is not None or "unproven" in statuses or not self.steps:
            return "unproven"
        return "within"

    @property
    def first_failure(self) -> StepJudgement | None:
        return next((s for s in self.steps if s.status == "outside"), None)

    @property
    def max_abs(self) -> float:
        return max((s.max_abs for s in self.steps), default=0.0)

    def summary(self) -> str:
        """One line: the status, steps, the largest probability difference and the worst share of its bound, the
        supports (recorded/served, the first few distinct)."""
        if self.not_judged is not None:
            return f"sampler unproven: {self.not_judged}"
        outside = sum(s.status == "outside" for s in self.steps)
        head = f"sampler {self.status}: {len(self.steps)} sampled steps, {outside} outside; max |Δp| {self.max_abs:.3g}"
        worst = max(self.steps, key=lambda s: s.share, default=None)
        if worst is not None:
            share = f"{worst.share:.2%} of" if worst.share <= 1.0 else f"{worst.share:.3g}x"
            head += f"; worst {share} the bound ({worst.where}, prompt {worst.prompt} step {worst.step})"
        pairs = dict.fromkeys(
            f"{s.kept}/{'>=' + str(s.asked) if s.served_kept is None else s.served_kept}" for s in self.steps
        )
        shown = ", ".join(list(pairs)[:6]) + (", ..." if len(pairs) > 6 else "")
        return f"{head}; kept recorded/served {shown}"

    def lines(self) -> list[str]:
        """The summary, what was sent, the first step that differs and why, the causes and their fixes."""
        out = [self.summary()]
        if self.sent:
            sent = ", ".join(f"{k}={_json(v)}" for k, v in self.sent.items())
            out.append(f"  sent per step: {sent}" + (f" (aligned: {', '.join(self.aligned)})" if self.aligned else ""))
        first = self.first_failure or next((s for s in self.steps if s.status == "unproven"), None)
        if first is not None:
            where = f"  prompt {first.prompt} step {first.step}: {first.reason}"
            out.append(where if first.reason.startswith("support") else f"{where}; {first.support_text}")
        out += [f"  cause: {c.text()}" for c in self.causes]
        if self.status == "outside" and not self.causes:
            out.append(
                "  cause unknown: no alignment genguard knows for this server makes the step within; the logits "
                "themselves may have moved (judge the raw values, or by a budget)"
            )
        return out


def _json(value: JSONScalar) -> str:
    return json.dumps(value)


def judgeable(trace: GenerationTrace) -> tuple[SamplerSettings | None, str | None]:
    """A trace's sampler and why it cannot be judged (None: it can; the sampler None: the trace does not sample)."""
    sampler = SamplerSettings.of(trace.settings)
    if sampler is None:
        return None, None
    if sampler.unmapped:
        return sampler, f"the snapshot's settings {', '.join(sampler.unmapped)} have no server field genguard maps"
    if any(s.support is None for p in trace.prompts for s in p.steps):
        return sampler, (
            "the snapshot holds no support for its sampled steps (recorded before genguard kept them): re-record it "
            "(pytest --snapshot-update) to judge the server's sampler"
        )
    return sampler, None


def step_sequence(trace: GenerationTrace) -> Sequence[tuple[int, int, Step]]:
    """Every (prompt index, step index, step) of a trace, in order."""
    return [(i, t, s) for i, p in enumerate(trace.prompts) for t, s in enumerate(p.steps)]
