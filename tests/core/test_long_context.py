"""The coverage line (how far a snapshot's prompts reach against the sliding window and the context) and the long
probe's position bands (where a divergence starts)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import trace_builder

from pytest_genguard.core.fidelity import StepFidelity, bounded_step
from pytest_genguard.core.long_context import MIN_BAND, Coverage, band_edges, bands, coverage

STEP = trace_builder.step([(5, math.log(0.7)), (6, math.log(0.2))])


def test_a_snapshot_that_never_passes_the_window_is_warned_about_and_one_that_does_is_not() -> None:
    short = trace_builder.trace([STEP] * 3)
    reach = coverage(short, sliding_window=16, context=512)
    assert reach.longest == len(short.prompts[0].prompt_ids) + 3 and not reach.passes_window
    line = reach.line()
    assert f"the prompts reach position {reach.longest}" in line and "sliding window 16, context 512" in line
    assert "WARNING: no prompt passes the sliding window" in line and "the long probe can" in line
    # its negative control: a prompt past the window, and a model without one
    long = trace_builder.trace([STEP] * 20)
    assert coverage(long, sliding_window=16, context=512).warning() is None
    assert "no sliding window" in Coverage(4, None, None).line() and "WARNING" not in Coverage(4).line()


def _steps(length: int, kld: Callable[[int], float]) -> list[StepFidelity]:
    base = bounded_step(0, 0, STEP, {5: math.log(0.7), 6: math.log(0.2)}, candidate_top=((5, math.log(0.7)),))
    return [dataclasses.replace(base, step=i, kld=kld(i)) for i in range(1, length)]


def test_the_bands_double_from_16_and_split_at_the_window() -> None:
    assert band_edges(100) == [0, 16, 32, 64, 100]
    assert band_edges(100, sliding_window=40) == [0, 16, 32, 40, 64, 100]
    shown = bands(_steps(100, lambda i: 0.0 if i < 40 else 1.0), sliding_window=40, min_width=1)
    assert [(b.start, b.end) for b in shown] == [(0, 16), (16, 32), (32, 40), (40, 64), (64, 100)]
    assert [b.kld_mean for b in shown] == [0.0, 0.0, 0.0, 1.0, 1.0]
    assert shown[3].line(0.5).endswith("(above 0.5)") and shown[0].line(0.5).endswith("(limit 0.5)")


def test_a_judged_band_spans_at_least_min_band_positions_narrower_ones_merged() -> None:
    assert MIN_BAND == 128
    probe = _steps(2048, lambda i: 0.0)
    spans = [(b.start, b.end) for b in bands(probe, sliding_window=512)]
    assert spans == [(0, 128), (128, 256), (256, 512), (512, 1024), (1024, 2048)]
    assert [(b.start, b.end) for b in bands(probe, sliding_window=16)] == spans  # a window edge inside a narrow band
    assert [(b.start, b.end) for b in bands(probe, sliding_window=640)] == [
        *spans[:3],
        (512, 640),
        (640, 1024),
        (1024, 2048),
    ]
    assert [(b.start, b.end) for b in bands(probe[:299])] == [(0, 128), (128, 300)]  # a narrow last band joins
    assert [(b.start, b.end, b.steps) for b in bands(probe[:89])] == [(0, 90, 89)]  # a short probe is one band
