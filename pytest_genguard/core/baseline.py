"""A candidate judged against a baseline: "no worse than the file we shipped". Standard library only.

A per-type preset is loose by construction (Q4_K_M files of one model span 4x in KLD across quantization recipes), so
a team that re-converts (a new llama.cpp, another recipe) asks a narrower question: is the new file as close to the
model as the one it replaces? Both files are measured in the same run against the same reference (the snapshot's
paths, and the long probe band by band), and the candidate's KLD may exceed the baseline's by the allowance alone:
`ALLOWANCE`, what separates two correct conversions of one type, measured (docs/fidelity.md, "Against a baseline").
The figures are alike (both exact, or both lower bounds over the same recorded top-k), so a within is proven either
way, as a calibrated preset's is.
"""

from __future__ import annotations

from collections.abc import Sequence

from pytest_genguard.core.fidelity import StepFidelity, aggregate
from pytest_genguard.core.limits import Budget
from pytest_genguard.core.long_context import BandRule, band_figures, bands, relative_band_rule

__all__ = ["ALLOWANCE", "FLOOR", "baseline_band_rule", "baseline_budget"]

ALLOWANCE = {"kld_mean": 1.5, "kld_p99": 2.0, "band": 1.5}
"""The candidate's KLD may be this many times the baseline's: the snapshot's mean and p99, each probe band's mean (and
the whole probe's mean and p99, as the snapshot's). What separates two correct conversions of one type, measured on
two families (docs/fidelity.md, "Against a baseline": llama.cpp's Q4_K_M and Q6_K from the F32 and from the BF16
file, and Gemma 3's shipped Q4_K_M against its re-quantization): at most 1.31x on a snapshot's mean, 1.65x on its
p99, 1.27x on a band's mean, either way round; the converter's and the quantizer's Q8_0 are the same file. A rope
base edited in the shipped Q4_K_M of Gemma 3 270M costs 2.9-3.8x its bands past position 128."""
FLOOR = 1e-9
"""A limit never falls below this: a baseline that costs nothing (an F32 file with an f32 cache) would allow
nothing at all."""


def _limit(ratio: float, figure: float) -> float:
    return max(ratio * figure, FLOOR)


def baseline_budget(baseline: Sequence[StepFidelity], name: str) -> Budget:
    """The limits a candidate is held to on the steps where `baseline` (the baseline's steps against the same
    reference, exact or bounded as the candidate's will be) was measured: `ALLOWANCE` times its mean and p99."""
    figures = aggregate(baseline)
    shown = ", ".join(f"{ALLOWANCE[key]:g}x its {key} {figures[key]:.3g}" for key in ("kld_mean", "kld_p99"))
    bounded = not all(s.exact for s in baseline)
    measured = " (both lower bounds over the snapshot's recorded top-k)" if bounded else ""
    return Budget(
        kld_mean=_limit(ALLOWANCE["kld_mean"], figures["kld_mean"]),
        kld_p99=_limit(ALLOWANCE["kld_p99"], figures["kld_p99"]),
        name=f"baseline {name}",
        basis=f"relative to the baseline {name}, measured in this run against the same reference{measured} ({shown})",
        alike=bounded,
    )


def baseline_band_rule(baseline: Sequence[StepFidelity], sliding_window: int | None, name: str) -> BandRule:
    """The probe's band limits against a baseline's own probe steps: `ALLOWANCE` ["band"] times each band's mean."""
    figures = band_figures(bands(baseline, sliding_window))
    return relative_band_rule(sliding_window, figures, ALLOWANCE["band"], f"the baseline {name}", FLOOR)
