"""A fidelity judgement's three states and the exit codes a CI gate reads from them (`core.gate`): within (proven:
every step exact), outside (proven, a lower bound above a limit is above it), unproven (within on lower bounds only)."""

from __future__ import annotations

import dataclasses
import math

import trace_builder

from pytest_genguard.core.budget import STATUSES, Budget, FidelityReport, traces_report
from pytest_genguard.core.fidelity import StepFidelity, bounded_step
from pytest_genguard.core.gate import EXIT_OUTSIDE, EXIT_UNPROVEN, EXIT_WITHIN, STATUS_EXIT, gate_line

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
    assert set(STATUS_EXIT) == set(STATUSES)
    assert len(set(STATUS_EXIT.values())) == 3 and not {2, 3} & set(STATUS_EXIT.values())
