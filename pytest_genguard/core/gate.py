"""The exit codes a CI gate reads from a fidelity judgement (`genguard fidelity`, `genguard check-server --budget`):
one table, so the two commands cannot drift apart. Standard library only.

A bound that proves nothing must be able to fail a gate: within a budget on lower bounds only ("unproven") has its
own code, apart from a proven "within" (0) and a proven "outside" (1), so a CI can refuse it or accept it knowingly.
"""

from __future__ import annotations

from pytest_genguard.core.budget import FidelityReport

__all__ = ["EXIT_OUTSIDE", "EXIT_STALE", "EXIT_UNPROVEN", "EXIT_USAGE", "EXIT_WITHIN", "STATUS_EXIT", "gate_line"]

EXIT_WITHIN = 0
EXIT_OUTSIDE = 1
EXIT_USAGE = 2
EXIT_STALE = 3
EXIT_UNPROVEN = 4

STATUS_EXIT = {"within": EXIT_WITHIN, "outside": EXIT_OUTSIDE, "unproven": EXIT_UNPROVEN}
"""`FidelityReport.status` -> exit code."""


def gate_line(report: FidelityReport) -> str:
    """One line naming the status, its exit code and the reference mass the bound covered (what to do when it is
    unproven)."""
    m = report.metrics
    status = report.status
    covered = (
        "exact: the whole vocabulary"
        if report.exact
        else f"{100 * m['covered_mean']:.2f}% on average, {100 * m['covered_min']:.2f}% at the least"
    )
    line = f"{status} (exit {STATUS_EXIT[status]}); reference mass covered: {covered}"
    if status == "unproven":
        line += (
            "; the KLD figures are lower bounds that hold the budget but prove nothing: record the reference with a "
            "larger top_k (and ask the server for more logprobs), or judge the model in process for exact figures"
        )
    return line
