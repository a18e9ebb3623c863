"""What a judgement sees of long context: how far a snapshot's prompts reach against the model's sliding window and
context length (`Coverage`), and the long probe's positions in bands (`ProbeInfo`, `bands`). Standard library only.

A rope base, rope scaling or sliding-window bug hardly moves positions below a few dozen tokens, and nothing about a
sliding window shows before the window is passed (llama.cpp #8676; #12957: "matches under 3k tokens, diverges at
14k"): a snapshot of short prompts is blind to them. The coverage line says so for every snapshot judged; the long
probe (`pytest_genguard.hf.long_probe`) reads a built-in text of thousands of tokens through both sides, and its bands
say at which positions a divergence starts.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_genguard.core.fidelity import StepFidelity
from pytest_genguard.core.text import number
from pytest_genguard.core.trace import GenerationTrace

__all__ = ["Band", "Coverage", "ProbeInfo", "band_edges", "bands", "coverage"]


@dataclass(frozen=True)
class Coverage:
    """The longest position a snapshot's prompts reach (prompt tokens + generated steps) against the model's sliding
    window and context length (None: the model has none, or it is not known)."""

    longest: int
    sliding_window: int | None = None
    context: int | None = None

    @property
    def passes_window(self) -> bool:
        return self.sliding_window is None or self.longest > self.sliding_window

    def line(self) -> str:
        """One line for the report: the reach, the window and the context, and a warning when the window is not
        passed."""
        window = "no sliding window" if self.sliding_window is None else f"sliding window {self.sliding_window}"
        context = "context length unknown" if self.context is None else f"context {self.context}"
        share = "" if not self.context else f" ({100 * self.longest / self.context:.1f}% of the context)"
        line = f"coverage: the prompts reach position {self.longest}{share}; {window}, {context}"
        warning = self.warning()
        return line if warning is None else f"{line}\n  WARNING: {warning}"

    def warning(self) -> str | None:
        if self.passes_window:
            return None
        return (
            f"no prompt passes the sliding window ({self.longest} <= {self.sliding_window} tokens): the snapshot "
            "cannot see a sliding-window or long-context bug; the long probe can (it needs the reference model in "
            "process), or record a prompt longer than the window"
        )


def coverage(trace: GenerationTrace, *, sliding_window: int | None, context: int | None) -> Coverage:
    """The `Coverage` of `trace`'s prompts."""
    longest = max((len(p.prompt_ids) + len(p.steps) for p in trace.prompts), default=0)
    window = sliding_window if sliding_window else None
    return Coverage(longest, window, context if context else None)


@dataclass(frozen=True)
class ProbeInfo:
    """What the long probe read: its text, how many tokens, the model's sliding window and context, and how its
    limits were set (`basis`)."""

    text: str
    tokens: int
    sliding_window: int | None = None
    context: int | None = None
    basis: str = ""


@dataclass(frozen=True)
class Band:
    """Positions [start, end) of the probe and their figures (exact, full vocabulary)."""

    start: int
    end: int
    steps: int
    kld_mean: float
    kld_max: float
    top1_agreement: float

    def line(self, limit: float | None) -> str:
        over = limit is not None and self.kld_mean > limit
        return (
            f"positions {self.start}-{self.end - 1}: KLD mean {number(self.kld_mean)}, max {number(self.kld_max)}, "
            f"same top-1 {100 * self.top1_agreement:.1f}%" + (f" (above {limit:g})" if over else "")
        )


def band_edges(length: int, sliding_window: int | None = None) -> list[int]:
    """Band edges over positions 0..length: powers of two from 16 (a rope bug grows with the position), plus the
    sliding window (where a window bug starts)."""
    edges = {0, length}
    edge = 16
    while edge < length:
        edges.add(edge)
        edge *= 2
    if sliding_window and 0 < sliding_window < length:
        edges.add(sliding_window)
    return sorted(edges)


def bands(steps: Sequence[StepFidelity], sliding_window: int | None = None) -> tuple[Band, ...]:
    """The probe's steps (`step` is the position of the token predicted) in `band_edges` bands."""
    if not steps:
        return ()
    length = max(s.step for s in steps) + 1
    edges = band_edges(length, sliding_window)
    out = []
    for start, end in itertools.pairwise(edges):
        inside = [s for s in steps if start <= s.step < end]
        if not inside:
            continue
        klds = [s.kld for s in inside]
        out.append(
            Band(
                start,
                end,
                len(inside),
                math.fsum(klds) / len(klds),
                max(klds),
                sum(s.same_top1 for s in inside) / len(inside),
            )
        )
    return tuple(out)
