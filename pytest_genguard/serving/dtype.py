"""Which dtype a server computed its logits in, from the logprobs alone, for servers that do not say (vLLM does not).

A logprob is ``logit - lse``, and ``lse`` is shared by every token of a step, so the differences between a step's
top-k logprobs are differences of logits. Logits computed in a 16-bit float lie on a coarse grid (bfloat16 keeps 8
significant bits: at magnitude 0.5 its values are 2^-8 apart), and so do those differences, up to the float32
rounding of the logprobs themselves; float32 logits leave them anywhere. A step is *on a grid* when every difference
is within that rounding of a multiple of some power of two at least 8 times coarser than the rounding. A dtype other
than the snapshot's must never pass as float32: every informative step on a grid reads as 16-bit.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["DtypeEvidence", "grid_of", "infer_dtype", "resolve_dtype"]

_MIN_VALUES = 4  # a step with fewer top-k values says too little to tell a grid from chance


@dataclass(frozen=True)
class DtypeEvidence:
    """The served dtype genguard judges with, and where it comes from (``reported``, ``declared``, ``inferred``)."""

    dtype: str
    source: str
    detail: str

    def describe(self) -> str:
        return f"{self.dtype} ({self.source}: {self.detail})"


def grid_of(logprobs: Sequence[float]) -> float | None:
    """The coarsest power-of-two grid the differences of one step's logprobs lie on, beyond float32 rounding; 0.0
    when they lie on none (float32 logits); None when the step has too few distinct values to say."""
    values = [v for v in logprobs if math.isfinite(v)]
    diffs = [v - values[0] for v in values[1:] if v != values[0]] if values else []
    if len(diffs) < _MIN_VALUES - 1:
        return None
    rounding = 2.0 * math.ulp(max(abs(v) for v in values) or 1.0) * 2.0**29  # a float32 ulp (float64 ulp * 2^29)
    for exponent in range(0, -40, -1):
        grid = 2.0**exponent
        if grid < 8 * rounding:
            break
        if all(abs(d - round(d / grid) * grid) <= rounding for d in diffs):
            return grid
    return 0.0


def infer_dtype(steps: Iterable[Sequence[float]]) -> DtypeEvidence:
    """The dtype the steps' top-k logprobs show: ``bfloat16`` when every informative step lies on a coarse grid (a
    float16 server reads so too: both are 16-bit, neither is float32), ``float32`` when some lie on none. Steps with
    fewer than 4 distinct values say nothing; with none that says anything, `ValueError`: declare the dtype."""
    grids = [g for g in (grid_of(step) for step in steps) if g is not None]
    if not grids:
        raise ValueError(
            f"the served dtype cannot be read from the logprobs: no step has {_MIN_VALUES} distinct top-k values (a "
            "snapshot recorded with top_k < 4?); declare the dtype the server computes in (--dtype, or dtype=)"
        )
    off = sum(1 for g in grids if g == 0.0)
    if not off:
        return DtypeEvidence(
            "bfloat16",
            "inferred",
            f"the top-k logprob differences of all {len(grids)} informative steps lie on a 2^"
            f"{int(math.log2(min(grids)))} grid or coarser: 16-bit logits",
        )
    return DtypeEvidence(
        "float32",
        "inferred",
        f"{off} of {len(grids)} informative steps' top-k logprob differences lie on no power-of-two grid: "
        "float32 logits",
    )


def resolve_dtype(
    reported: str | None, declared: str | None, steps: Iterable[Sequence[float]], *, where: str
) -> DtypeEvidence:
    """The served dtype: what the server reports, else what the user declares, else what the logprobs show. A
    declaration the server's report contradicts is an error (`ValueError` naming `where`)."""
    if reported is not None:
        if declared is not None and declared != reported:
            raise ValueError(f"{where}: you declared the served dtype {declared}, but the server reports {reported}")
        return DtypeEvidence(reported, "reported", "by the server")
    if declared is not None:
        return DtypeEvidence(declared, "declared", "by the user; the server does not report it")
    return infer_dtype(steps)
