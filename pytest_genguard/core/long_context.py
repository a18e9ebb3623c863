"""What a judgement sees of long context: how far a snapshot's prompts reach against the model's sliding window and
context length (`Coverage`), and the long probe's positions in bands (`ProbeInfo`, `bands`). Standard library only.

A rope base, rope scaling or sliding-window bug hardly moves positions below a few dozen tokens, and nothing about a
sliding window shows before the window is passed (llama.cpp #8676; #12957: "matches under 3k tokens, diverges at
14k"): a snapshot of short prompts is blind to them. The coverage line says so for every snapshot judged; the long
probe (`pytest_genguard.hf.long_probe`) reads a built-in text of thousands of tokens through both sides, and is
judged band by band (`BandRule`): a positional bug lives past some position, and the probe's mean over all of it is
diluted by the positions before; a band whose KLD mean breaks its limit fails the probe, and names where it starts.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pytest_genguard.core.fidelity import StepFidelity
from pytest_genguard.core.text import number
from pytest_genguard.core.trace import GenerationTrace

__all__ = [
    "MIN_BAND",
    "Band",
    "BandRule",
    "Coverage",
    "ProbeInfo",
    "band_edges",
    "band_figures",
    "band_key",
    "bands",
    "coverage",
    "relative_band_rule",
]

MIN_BAND = 128
"""The fewest positions a judged band spans: fewer, and a few positions decide a correct file's band. Derived on real
files (docs/fidelity.md, "Judged band by band"): over every window of n consecutive probe positions of 15 correct
GGUF files of two families (SmolLM2-135M, Gemma 3 270M: Q8_0, Q6_K, Q4_K_M, F32 under each KV cache type), the worst
window's KLD ratio to the reference's own copy exceeds the file's whole-probe ratio by up to 9.3x at n = 16, 5.8x at
32, 3.2x at 64, 2.4x at 128; a correct file sits 1.85x (F32, q4_0 cache) to 5.0x (Gemma's Q8_0) under its limit on
the whole probe, so 128 is the narrowest power of two at which no window of those files breaks its limit (64 lets the
F32 files': 2.40 > 2.03), SmolLM2's Q4_K_M aside (its preset sits 1.22x above it: its aligned bands hold). Narrower
bands are merged into the next (the first, from position 0, into the ones after it)."""


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

    @property
    def name(self) -> str:
        return f"positions {self.start}-{self.end - 1}"

    def line(self, limit: float | None) -> str:
        over = limit is not None and self.kld_mean > limit
        shown = "" if limit is None else f" (above {limit:.3g})" if over else f" (limit {limit:.3g})"
        return (
            f"{self.name}: KLD mean {number(self.kld_mean)}, max {number(self.kld_max)}, "
            f"same top-1 {100 * self.top1_agreement:.1f}%{shown}"
        )


@dataclass(frozen=True)
class BandRule:
    """How the probe's bands are judged: each band's KLD mean against its own limit (`limits`, by the band's
    (start, end): a baseline's, `core.baseline`), else against the budget's ``kld_mean``. `sliding_window` adds the
    window's edge to the bands (where a window bug starts)."""

    sliding_window: int | None = None
    limits: tuple[tuple[tuple[int, int], float], ...] = ()
    basis: str = ""
    """How the per-band limits were set, for the report."""

    def limit(self, band: Band, default: float | None) -> float | None:
        """`band`'s limit: its own, else `default` (the budget's kld_mean; None: not judged)."""
        return dict(self.limits).get((band.start, band.end), default)


def band_key(start: int, end: int) -> str:
    """A band's KLD mean among a calibration's figures (after the precision: ``"int8.band.0-128.kld_mean"``)."""
    return f"band.{start}-{end}.kld_mean"


def band_figures(shown: Sequence[Band]) -> dict[str, float]:
    """Each band's KLD mean by `band_key`: a calibration copy's, stored with its whole-probe figures."""
    return {band_key(b.start, b.end): b.kld_mean for b in shown}


def relative_band_rule(
    sliding_window: int | None, figures: Mapping[str, float], ratio: float, what: str, floor: float = 1e-9
) -> BandRule:
    """Each band's limit `ratio` times `figures`' KLD mean of the same band (`band_key`; a band without one is judged
    by the budget's kld_mean), at least `floor`: the KLD a correct conversion costs depends on the positions' text as
    much as on the conversion (Gemma 3's positions 512-1023 cost every copy measured 6-9x less than 1024-2047), so a
    band is held to what the reference's own copy, or a baseline, costs in that band."""
    limits = []
    for key, value in figures.items():
        if key.startswith("band.") and key.endswith(".kld_mean"):
            start, end = key.removeprefix("band.").removesuffix(".kld_mean").split("-")
            limits.append(((int(start), int(end)), max(ratio * value, floor)))
    return BandRule(sliding_window, tuple(limits), f"{ratio:g}x {what}'s KLD mean in the same band")


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


def bands(
    steps: Sequence[StepFidelity], sliding_window: int | None = None, *, min_width: int = MIN_BAND
) -> tuple[Band, ...]:
    """The probe's steps (`step` is the position of the token predicted) in `band_edges` bands at least `min_width`
    positions wide: a narrower band is merged into the next, a narrow last one into the one before (a probe shorter
    than `min_width` is one band)."""
    if not steps:
        return ()
    length = max(s.step for s in steps) + 1
    spans: list[tuple[int, int]] = []
    start = 0
    for _, high in itertools.pairwise(band_edges(length, sliding_window)):
        if high - start >= min_width:
            spans.append((start, high))
            start = high
    if start < length:
        spans[-1:] = [(spans[-1][0] if spans else 0, length)]
    out = []
    for low, high in spans:
        inside = [s for s in steps if low <= s.step < high]
        if inside:
            out.append(_band((low, high), inside))
    return tuple(out)


def _band(span: tuple[int, int], inside: Sequence[StepFidelity]) -> Band:
    klds = [s.kld for s in inside]
    top1 = sum(s.same_top1 for s in inside) / len(inside)
    return Band(span[0], span[1], len(inside), math.fsum(klds) / len(klds), max(klds), top1)
