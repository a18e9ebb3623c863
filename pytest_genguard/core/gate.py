"""The one gate every budget judge exits on (`genguard fidelity`, `genguard check-server --budget`, `genguard
check-gguf`, and under ``--genguard-server`` / ``--genguard-gguf`` the assertion): one table (`STATUS_EXIT`), so the
judges cannot drift apart; docs/fidelity.md#the-gate is its one description, the other pages link to it. Standard
library only.

Exit 0 within (proven), 1 outside (proven), 2 bad input, 3 stale, 4 unproven (within on lower bounds only); the worst
wins in that order: 1, then 3, then 4. A bound that proves nothing never exits 0, and under pytest it fails the
assertion, naming how to prove it (`unproven_hint`).
"""

from __future__ import annotations

from collections.abc import Iterable

from pytest_genguard.core.budget import FidelityReport

__all__ = [
    "EXIT_OUTSIDE",
    "EXIT_STALE",
    "EXIT_UNPROVEN",
    "EXIT_USAGE",
    "EXIT_WITHIN",
    "STATUS_EXIT",
    "UNPROVEN",
    "exit_for",
    "gate_line",
    "unproven_hint",
]

EXIT_WITHIN = 0
EXIT_OUTSIDE = 1
EXIT_USAGE = 2
EXIT_STALE = 3
EXIT_UNPROVEN = 4

STATUS_EXIT = {
    "within": EXIT_WITHIN,
    "holds": EXIT_WITHIN,
    "outside": EXIT_OUTSIDE,
    "regression": EXIT_OUTSIDE,
    "stale": EXIT_STALE,
    "unproven": EXIT_UNPROVEN,
}
"""A judgement's status -> exit code: `FidelityReport.status` (within, outside, unproven), the float rule's
(holds, regression) and stale."""

UNPROVEN = "unproven: within on lower bounds only, which proves nothing"
"""What a judge says of an unproven judgement where it names its verdict."""

_ORDER = (EXIT_OUTSIDE, EXIT_STALE, EXIT_UNPROVEN)

IN_PROCESS = (
    "judge it with the reference model in process (fidelity(..., reference_model=), genguard check-gguf --model DIR, "
    "--genguard-gguf-model DIR): exact over the full vocabulary"
)
"""How a judge with the reference model at hand proves a bound (the default way named by `unproven_hint`)."""


def exit_for(statuses: Iterable[str]) -> int:
    """The exit code of several judgements (`STATUS_EXIT`'s keys): the worst wins, 1 then 3 then 4, else 0."""
    codes = {STATUS_EXIT[s] for s in statuses}
    return next((code for code in _ORDER if code in codes), EXIT_WITHIN)


def unproven_hint(in_process: str = IN_PROCESS) -> str:
    """How to turn an unproven judgement into a proven one: calibrate the snapshot (its own conversion's bounds,
    measured like for like), a larger recorded top-k, or `in_process` (what the judge at hand offers)."""
    return (
        "to prove it: calibrate the snapshot with pytest_genguard.calibrate(model, tokenizer, trace) and store it "
        "(the preset then scales the reference's own conversion measured over the same top-k), record it with a "
        f"larger top_k, or {in_process}"
    )


def gate_line(report: FidelityReport, *, in_process: str = IN_PROCESS) -> str:
    """One line naming the status, its exit code and the reference mass the bound covered (how to prove it when it
    is unproven)."""
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
            f"; the KLD figures are lower bounds that hold the budget but prove nothing: {unproven_hint(in_process)}"
        )
    return line
