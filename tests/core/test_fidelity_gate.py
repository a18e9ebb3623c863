"""A fidelity judgement's three states and the exit codes a CI gate reads from them (`core.gate`): within (proven:
every step exact), outside (proven, a lower bound above a limit is above it), unproven (within on lower bounds only)."""

from __future__ import annotations

import dataclasses
import math

import trace_builder

from pytest_genguard.core.budget import STATUSES, Budget, FidelityReport, traces_report, worst_status
from pytest_genguard.core.fidelity import StepFidelity, bounded_step
from pytest_genguard.core.gate import (
    EXIT_OUTSIDE,
    EXIT_STALE,
    EXIT_UNPROVEN,
    EXIT_WITHIN,
    STATUS_EXIT,
    exit_for,
    gate_line,
)
from pytest_genguard.core.long_context import BandRule

REF = trace_builder.step([(5, math.log(0.7)), (6, math.log(0.2)), (7, math.log(0.05))])
NEAR = trace_builder.step([(5, math.log(0.69)), (6, math.log(0.21)), (7, math.log(0.05))])
FAR = trace_builder.step([(5, math.log(0.5)), (6, math.log(0.4)), (7, math.log(0.05))])


def exact(step: StepFidelity) -> StepFidelity:
    """The step as the in-process judge gives it: the full distribution known on both sides."""
    return dataclasses.replace(step, exact=True, covered=1.0)


def _step(candidate: object) -> StepFidelity:
    assert isinstance(candidate, type(REF))
    known = dict(zip(candidate.top_ids, candidate.top_logprobs, strict=True))
    top = tuple(zip(candidate.top_ids, candidate.top_logprobs, strict=True))
    return bounded_step(0, 0, REF, known, candidate_top=top)


def test_an_exact_report_within_its_budget_is_within_and_exits_0() -> None:
    report = FidelityReport((exact(_step(NEAR)),) * 12, Budget(kld_mean=1e-2))
    assert report.status == "within" and STATUS_EXIT[report.status] == EXIT_WITHIN
    assert "reference mass covered: exact" in gate_line(report)


def test_a_lower_bound_within_the_budget_is_unproven_and_exits_4() -> None:
    report = traces_report(trace_builder.trace([REF] * 12), trace_builder.trace([NEAR] * 12), Budget(kld_mean=1e-2))
    assert report.holds and not report.exact
    assert report.status == "unproven" and STATUS_EXIT[report.status] == EXIT_UNPROVEN == 4
    assert "UNPROVEN" in str(report) and "prove nothing" in gate_line(report)
    assert "95.00% on average" in gate_line(report)


def test_a_lower_bound_above_a_limit_is_outside_proven_and_exits_1() -> None:
    # the negative control of "unproven": the same bound, a limit it breaks
    report = traces_report(trace_builder.trace([REF] * 12), trace_builder.trace([FAR] * 12), Budget(kld_mean=1e-2))
    assert not report.exact and report.metrics["kld_mean"] > 1e-2
    assert report.status == "outside" and STATUS_EXIT[report.status] == EXIT_OUTSIDE
    # and an exact report outside its budget is outside too
    assert FidelityReport((exact(_step(FAR)),) * 12, Budget(kld_mean=1e-2)).status == "outside"


def test_every_status_has_a_distinct_exit_code_apart_from_bad_input_and_stale() -> None:
    assert set(STATUSES) <= set(STATUS_EXIT)
    codes = {STATUS_EXIT[s] for s in STATUSES}
    assert len(codes) == 3 and not {2, 3} & codes
    assert STATUS_EXIT["stale"] == EXIT_STALE == 3
    assert STATUS_EXIT["holds"] == EXIT_WITHIN and STATUS_EXIT["regression"] == EXIT_OUTSIDE  # the float rule's


def test_the_worst_judgement_decides_the_exit_outside_then_stale_then_unproven() -> None:
    assert exit_for([]) == exit_for(["within", "holds"]) == EXIT_WITHIN
    assert exit_for(["within", "unproven"]) == EXIT_UNPROVEN
    assert exit_for(["unproven", "stale", "within"]) == EXIT_STALE
    assert exit_for(["stale", "regression", "unproven"]) == exit_for(["outside", "within"]) == EXIT_OUTSIDE


def test_an_unproven_gate_line_names_how_to_prove_it() -> None:
    report = traces_report(trace_builder.trace([REF] * 12), trace_builder.trace([NEAR] * 12), Budget(kld_mean=1e-2))
    line = gate_line(report, in_process="pass --model DIR")
    assert "pytest_genguard.calibrate(model, tokenizer, trace)" in line and "larger top_k" in line
    assert line.endswith("or pass --model DIR")
    assert "calibrate" not in gate_line(FidelityReport((exact(_step(NEAR)),) * 12, Budget(kld_mean=1e-2)))


def test_the_long_probe_outside_its_budget_makes_the_whole_report_outside() -> None:
    within = FidelityReport((exact(_step(NEAR)),) * 12, Budget(kld_mean=1e-2))
    positions = tuple(dataclasses.replace(exact(_step(FAR)), step=i) for i in range(40))
    probe = FidelityReport(positions, Budget(kld_mean=1e-2), band_rule=BandRule())
    assert within.status == "within" and probe.status == "outside"
    judged = dataclasses.replace(within, probe=probe)
    assert judged.own_status == "within" and judged.status == "outside" and not judged.holds
    text = str(judged)
    assert "fidelity OUTSIDE budget custom: long probe kld_mean" in text
    assert "  long probe OUTSIDE: 40 positions" in text
    assert "positions 0-39: KLD mean" in text and "<- the divergence starts here" in text  # one band: 40 positions
    # its negative control: the probe within keeps the report within
    assert dataclasses.replace(within, probe=within).status == "within"
    # an unproven snapshot and a probe outside: outside (the worst)
    unproven = traces_report(trace_builder.trace([REF] * 12), trace_builder.trace([NEAR] * 12), Budget(kld_mean=1e-2))
    assert dataclasses.replace(unproven, probe=probe).status == "outside"
    assert worst_status(["within", "unproven"]) == "unproven"
