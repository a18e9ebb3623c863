"""How far a candidate (a bf16 cast, an int8 or int4 quantization, another engine) is from the reference model that
was tested: per-step metrics along the reference's paths, and their aggregates. Standard library only.

The metrics are those of llama.cpp's ``llama-perplexity --kl-divergence`` (tools/perplexity/perplexity.cpp), where it
has one, with the reference model as its "base" and the reference path's token as its evaluated token:

- KLD of a step: ``sum_i p_i (log p_i - log q_i)``, KL(reference || candidate) in nats;
- Δp: ``q(token) - p(token)``, the candidate's probability of the reference token minus the reference's;
- same top-1 ("Same top p"): the share of steps whose argmax agrees;
- the aggregates: mean ± stderr (``sqrt((E[x²] - E[x]²) / (n - 1))``, 0 below 11 steps, as llama.cpp), median, the
  percentiles by linear interpolation at ``fraction · (n - 1)`` of the sorted values, maximum, RMS Δp.

Added here: the reference token's rank under the candidate, *flips* (arXiv 2407.09141: steps whose "answer" changed:
the reference's top-1 was the path's token and the candidate's is not, or the other way round), and how many steps
the candidate's own greedy decoding stays on the reference path (per prompt, the steps before its top-1 first leaves
the path).

Exact or bounded, never confused. With both full distributions (`pytest_genguard.hf.fidelity` with the reference
model in process) every value is exact. From a reference trace alone only its recorded top-k is known: the KLD is
then computed on a coarsened distribution (each token whose probability is known on both sides, and one bucket for
the rest of the vocabulary), which by the data-processing inequality is a true *lower bound* of the KLD; `covered`
says how much of the reference's probability mass the known tokens held (the closer to 1, the tighter the bound).
The traces store float32 logprobs, normalized over the whole vocabulary, so the rest bucket's mass is known without
storing it (``1 - sum``); what tightens the bound is a larger recorded top-k (``record(..., top_k=20)``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pytest_genguard.core.trace import GenerationTrace, Step

__all__ = [
    "METRIC_KEYS",
    "StepFidelity",
    "aggregate",
    "bounded_step",
    "mean_and_stderr",
    "percentile",
    "trace_fidelity",
]

_TINY = 1e-12  # a rest bucket below this is float32 rounding, not mass (see _coarse_kld)

METRIC_KEYS = (
    "steps",
    "kld_mean",
    "kld_stderr",
    "kld_median",
    "kld_p90",
    "kld_p99",
    "kld_p999",
    "kld_max",
    "top1_agreement",
    "mean_delta_p",
    "rms_delta_p",
    "max_abs_delta_p",
    "flips",
    "on_path_steps",
    "on_path_share",
    "covered_min",
    "covered_mean",
)
"""The keys of `aggregate()`'s mapping, in the order reports list them."""


@dataclass(frozen=True)
class StepFidelity:
    """One reference step and what the candidate gives there (teacher forced on the same context).

    `kld` is exact when `covered` is 1.0 and `exact` is set, else a lower bound. `delta_p` is None where the
    candidate's probability of the reference token is unknown (not in a recorded candidate top-k); `rank` (0-based,
    the reference token's rank under the candidate) is None where it lies beyond the candidate's recorded top-k.
    """

    prompt: int
    step: int
    token_id: int
    kld: float
    delta_p: float | None
    reference_top1: int
    candidate_top1: int
    rank: int | None
    covered: float
    exact: bool
    reference_top: tuple[tuple[int, float], ...] = ()
    """The reference's top-k (id, logprob), best first, for the failure text."""
    candidate_top: tuple[tuple[int, float], ...] = ()
    complete: bool = True
    """Whether the candidate's probability was known for every token the reference's step knows (its recorded top-k
    and token): then the bound is the KLD over exactly that partition, as `calibrate()` measures its own copies'."""

    @property
    def same_top1(self) -> bool:
        return self.reference_top1 == self.candidate_top1

    @property
    def flipped(self) -> bool:
        """Whether the step's "answer" changed (arXiv 2407.09141): the reference's top-1 was the path's token and the
        candidate's is not, or the other way round."""
        return (self.reference_top1 == self.token_id) != (self.candidate_top1 == self.token_id)


def mean_and_stderr(values: Sequence[float]) -> tuple[float, float]:
    """llama.cpp's ``mean_and_uncertainty``: the mean and ``sqrt((E[x²] - E[x]²) / (n - 1))`` (0 for 10 values or
    fewer, or a non-positive variance)."""
    n = len(values)
    if n == 0:
        return 0.0, 0.0
    mean = math.fsum(values) / n
    var = math.fsum(v * v for v in values) / n - mean * mean
    return mean, math.sqrt(var / (n - 1)) if var > 0 and n > 10 else 0.0


def percentile(ordered: Sequence[float], fraction: float) -> float:
    """llama.cpp's percentile of sorted values: linear interpolation at ``fraction · (n - 1)``."""
    if not ordered:
        return 0.0
    if fraction <= 0:
        return ordered[0]
    if fraction >= 1:
        return ordered[-1]
    position = fraction * (len(ordered) - 1)
    low = int(position)
    weight = position - low
    return (1 - weight) * ordered[low] + weight * ordered[min(low + 1, len(ordered) - 1)]


def _median(ordered: Sequence[float]) -> float:
    n = len(ordered)
    if n == 0:
        return 0.0
    return ordered[n // 2] if n % 2 else 0.5 * (ordered[n // 2] + ordered[n // 2 - 1])


def _on_path(steps: Sequence[StepFidelity]) -> int:
    """Steps, summed over prompts, before the candidate's top-1 first leaves the reference path."""
    total = 0
    left: set[int] = set()
    for s in steps:  # in prompt, step order
        if s.prompt in left:
            continue
        if s.candidate_top1 == s.token_id:
            total += 1
        else:
            left.add(s.prompt)
    return total


def aggregate(steps: Sequence[StepFidelity]) -> dict[str, float]:
    """The metrics over `steps` (keys: `METRIC_KEYS`); KLD figures are lower bounds when any step is not exact."""
    klds = sorted(s.kld for s in steps)
    mean, stderr = mean_and_stderr(klds)
    deltas = [s.delta_p for s in steps if s.delta_p is not None]
    n = len(steps)
    covered = [s.covered for s in steps]
    on_path = _on_path(steps)
    return {
        "steps": float(n),
        "kld_mean": mean,
        "kld_stderr": stderr,
        "kld_median": _median(klds),
        "kld_p90": percentile(klds, 0.90),
        "kld_p99": percentile(klds, 0.99),
        "kld_p999": percentile(klds, 0.999),
        "kld_max": klds[-1] if klds else 0.0,
        "top1_agreement": sum(s.same_top1 for s in steps) / n if n else 1.0,
        "mean_delta_p": math.fsum(deltas) / len(deltas) if deltas else 0.0,
        "rms_delta_p": math.sqrt(math.fsum(d * d for d in deltas) / len(deltas)) if deltas else 0.0,
        "max_abs_delta_p": max((abs(d) for d in deltas), default=0.0),
        "flips": float(sum(s.flipped for s in steps)),
        "on_path_steps": float(on_path),
        "on_path_share": on_path / n if n else 1.0,
        "covered_min": min(covered, default=1.0),
        "covered_mean": math.fsum(covered) / n if n else 1.0,
    }


# ---------------------------------------------------------------------------------------------------- the bound


def _coarse_kld(p: Mapping[int, float], q: Mapping[int, float], q_rest: float | None) -> tuple[float, float]:
    """KL of the coarsened distributions: each id of `p` (reference logprobs) and one bucket for the rest of the
    vocabulary, against `q` (candidate logprobs of the same ids) and `q_rest` (the candidate's mass outside them;
    None: ``1 - sum``). Returns (the bound, the reference mass the ids cover).

    A rest bucket whose mass is rounding (below 1e-12 on one side while the other has mass) is merged into the
    most probable id's bucket: a coarser partition, so still a lower bound, instead of dividing by rounding."""
    buckets = [(math.exp(p[i]), math.exp(q[i])) for i in p]
    p_known = math.fsum(b[0] for b in buckets)
    q_known = math.fsum(b[1] for b in buckets)
    p_rest = max(0.0, 1.0 - p_known)
    q_left = max(0.0, 1.0 - q_known) if q_rest is None else max(0.0, q_rest)
    if (p_rest > _TINY and q_left <= _TINY) or (q_left > _TINY and p_rest <= _TINY):
        top = max(range(len(buckets)), key=lambda k: buckets[k][0])
        buckets[top] = (buckets[top][0] + p_rest, buckets[top][1] + q_left)
        p_rest = q_left = 0.0
    total = math.fsum(pi * (math.log(pi) - math.log(qi)) for pi, qi in buckets if pi > 0 and qi > 0)
    if p_rest > 0 and q_left > 0:
        total += p_rest * (math.log(p_rest) - math.log(q_left))
    return max(0.0, total), min(1.0, p_known)


def _known(step: Step) -> dict[int, float]:
    """Every logprob a trace step knows: its top-k and its chosen token."""
    known = dict(zip(step.top_ids, step.top_logprobs, strict=True))
    known.setdefault(step.token_id, step.logprob)
    return known


def _top(step: Step) -> tuple[tuple[int, float], ...]:
    return tuple(zip(step.top_ids, step.top_logprobs, strict=True))


def bounded_step(
    prompt: int,
    index: int,
    reference: Step,
    candidate: Mapping[int, float],
    *,
    candidate_top: tuple[tuple[int, float], ...],
    candidate_rest: float | None = None,
    rank: int | None = None,
    top1: int | None = None,
) -> StepFidelity:
    """A step whose reference side is a trace step (its top-k) and whose candidate side gives the logprobs of
    `candidate`'s ids (all of the reference's known ids when the candidate model is in process; else those a
    candidate trace recorded). The KLD is the coarsened lower bound over the ids known on both sides; `rank` and
    `top1` (when None) come from `candidate_top`."""
    p = _known(reference)
    shared = {i: lp for i, lp in p.items() if i in candidate}
    if not shared:  # nothing known on both sides: the bound says nothing (0), and covers nothing
        kld, covered = 0.0, 0.0
    else:
        kld, covered = _coarse_kld(shared, candidate, candidate_rest)
    token = reference.token_id
    q_token = candidate.get(token)
    if rank is None:
        rank = next((r for r, (i, _) in enumerate(candidate_top) if i == token), None)
    return StepFidelity(
        prompt=prompt,
        step=index,
        token_id=token,
        kld=kld,
        delta_p=None if q_token is None else math.exp(q_token) - math.exp(reference.logprob),
        reference_top1=reference.top_ids[0] if reference.top_ids else token,
        candidate_top1=top1 if top1 is not None else candidate_top[0][0] if candidate_top else token,
        rank=rank,
        covered=covered,
        exact=False,
        reference_top=_top(reference),
        candidate_top=candidate_top,
        complete=len(shared) == len(p),
    )


def trace_fidelity(
    reference: GenerationTrace, candidate: GenerationTrace
) -> tuple[list[StepFidelity], int, tuple[tuple[int, int], ...]]:
    """Per-step metrics from two traces alone (lower bounds; see the module docstring), how many reference steps
    could not be compared, and where the candidate's path left the reference's ((prompt, step) pairs). Prompts are
    matched by text. A teacher-forced candidate holds the reference's tokens at every step, so every step is
    compared; a regenerated one (it generated its own path: llama-server, a trace of `record()`) is compared up to and
    including the first step where it took another token: after it the contexts differ."""
    by_prompt = {p.prompt: p for p in candidate.prompts}
    out: list[StepFidelity] = []
    skipped = 0
    departures: list[tuple[int, int]] = []
    for b, ref in enumerate(reference.prompts):
        cand = by_prompt.get(ref.prompt)
        if cand is None:
            skipped += len(ref.steps)
            continue
        compared = 0
        for t, (r, c) in enumerate(zip(ref.steps, cand.steps, strict=False)):
            out.append(bounded_step(b, t, r, _known(c), candidate_top=_top(c)))
            compared += 1
            if r.token_id != c.token_id:
                departures.append((b, t))
                break
        skipped += len(ref.steps) - compared
    return out, skipped, tuple(departures)
