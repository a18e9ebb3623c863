"""The long probe judged where a bug lives: a band whose KLD mean breaks its limit fails the probe and is named, though
the whole probe's mean (diluted by the positions before) holds; and a candidate judged against a baseline's own
figures, band by band (`core.baseline`)."""

from __future__ import annotations

import dataclasses
import math

import trace_builder

from pytest_genguard.core.baseline import ALLOWANCE, baseline_band_rule, baseline_budget
from pytest_genguard.core.budget import Budget, FidelityReport
from pytest_genguard.core.fidelity import StepFidelity, bounded_step
from pytest_genguard.core.long_context import BandRule, ProbeInfo

STEP = trace_builder.step([(5, math.log(0.7)), (6, math.log(0.2))])
BASE = dataclasses.replace(
    bounded_step(0, 0, STEP, {5: math.log(0.7), 6: math.log(0.2)}, candidate_top=((5, math.log(0.7)),)),
    exact=True,
    covered=1.0,
)


def probe(kld_at: dict[tuple[int, int], float], default: float = 0.01) -> tuple[StepFidelity, ...]:
    """2,047 exact positions, each band's KLD as given."""

    def kld(i: int) -> float:
        return next((v for (a, b), v in kld_at.items() if a <= i < b), default)

    return tuple(dataclasses.replace(BASE, step=i, kld=kld(i)) for i in range(1, 2048))


def judged(steps: tuple[StepFidelity, ...], budget: Budget, rule: BandRule | None = None) -> FidelityReport:
    """A snapshot report carrying `steps` as its long probe."""
    probe_report = FidelityReport(steps, budget, band_rule=rule or BandRule(sliding_window=512))
    info = ProbeInfo("the text", 2048, 512, 32768, "limits as given")
    return FidelityReport((BASE,) * 12, budget, probe=probe_report, probe_info=info)


def test_a_band_past_its_limit_fails_the_probe_though_the_whole_mean_holds_and_names_where_it_starts() -> None:
    # Gemma 3's Q8_0 with its global rope base edited, in shape: bands of 256-511 and 1024-2047 above the limit,
    # the first positions low, the whole mean under the limit
    steps = probe({(1, 256): 0.002, (256, 512): 0.09, (512, 1024): 0.02, (1024, 2048): 0.075})
    report = judged(steps, Budget(kld_mean=0.0717))
    assert report.probe is not None and report.probe.metrics["kld_mean"] < 0.0717 and not report.probe.violations
    assert report.probe.status == "outside" and report.status == "outside" and not report.holds
    assert [(b.start, b.end) for b, _ in report.probe.band_violations] == [(256, 512), (1024, 2048)]
    text = str(report)
    assert text.splitlines()[0].startswith("fidelity OUTSIDE budget custom: long probe positions 256-511")
    assert "positions 256-511: KLD mean 0.09, max 0.09, same top-1 100.0% (above 0.0717)  <- the divergence" in text
    assert "positions 512-1023: KLD mean 0.02, max 0.02, same top-1 100.0% (limit 0.0717)\n" in text
    assert "2 bands above its KLD limit, from positions 256-511" in text
    data = report.to_json()["probe"]["bands"]
    assert [b["outside"] for b in data] == [False, False, True, False, True] and data[2]["limit"] == 0.0717
    # its negative control: the same probe with every band under the limit holds
    assert judged(probe({(256, 512): 0.05}), Budget(kld_mean=0.0717)).status == "within"


def test_a_few_large_positions_cannot_trip_a_band_they_do_not_dominate() -> None:
    # one position at 5 nats in the first band of 127 positions, the rest correct: its mean stays under 4x the rest
    steps = probe({(60, 61): 5.0}, default=0.01)
    report = judged(steps, Budget(kld_mean=0.08))
    assert report.probe is not None and report.probe.bands[0].kld_mean < 0.08 and report.status == "within"
    # ... where a band of 16 positions, as the probe was cut before, would have been tripped by it
    assert 5.0 / 16 > 0.08


def test_a_candidate_is_judged_against_a_baselines_own_figures_band_by_band() -> None:
    shipped = probe({(256, 512): 0.036, (1024, 2048): 0.035}, default=0.02)
    rule = baseline_band_rule(shipped, 512, "shipped.gguf")
    limits = baseline_budget(shipped, "shipped.gguf")
    assert limits.name == "baseline shipped.gguf" and "measured in this run against the same reference" in limits.basis
    assert math.isclose(limits.kld_mean or 0.0, ALLOWANCE["kld_mean"] * FidelityReport(shipped).metrics["kld_mean"])
    same = judged(shipped, limits, rule)
    assert same.status == "within" and same.probe is not None and not same.probe.band_violations
    # the shipped file with its rope base edited: 2.9-3.4x its bands past 256 (Gemma 3 270M's Q4_K_M)
    edited = probe({(256, 512): 0.105, (1024, 2048): 0.119}, default=0.02)
    report = judged(edited, limits, rule)
    assert report.probe is not None and report.status == "outside"
    assert [(b.start, b.end) for b, _ in report.probe.band_violations] == [(256, 512), (1024, 2048)]
    assert "band limits: 1.5x the baseline shipped.gguf's KLD mean in the same band" in str(report)
    # a baseline that costs nothing (an F32 file, f32 cache) still allows its floor, not zero
    assert baseline_budget(probe({}, default=0.0), "f32.gguf").kld_mean == 1e-9


def test_a_bounded_candidate_against_a_bounded_baseline_is_proven_like_for_like() -> None:
    bounded = tuple(dataclasses.replace(BASE, step=i, exact=False, covered=0.9, kld=0.01) for i in range(12))
    limits = baseline_budget(bounded, "shipped.gguf")
    assert limits.alike and "both lower bounds" in limits.basis
    assert FidelityReport(bounded, limits).status == "within"
    # its negative control: the same bounds under a budget not measured like them prove nothing
    assert FidelityReport(bounded, Budget(kld_mean=1.0)).status == "unproven"
