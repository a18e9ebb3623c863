"""What genguard saw in a run: each test's events (`EVENTS_KEY`), carried in its report's `user_properties`
(`USER_PROPERTY`, so they cross pytest-xdist), and added up in a `Tally` for the terminal summary and the HTML
report, with the counting lines both show.

A check that did not hold counts as failed only when its test failed: a test may check on purpose that a comparison
or an invariant fails (a negative control); such checks are counted apart (`misses`), so that an all-passing run
never reports failures.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from pytest_genguard.core.change import Change, SuiteChange
from pytest_genguard.core.events import CheckEvent, Event, FragileStep, InvariantEvent, PinEvent, RecordEvent
from pytest_genguard.core.markdown import Row, RunSummary
from pytest_genguard.core.text import plural
from pytest_genguard.core.verdict import Status, Verdict

__all__ = [
    "EVENTS_KEY",
    "TALLY_KEY",
    "USER_PROPERTY",
    "Seen",
    "Tally",
    "count_blocks",
    "counts_lines",
    "run_summary",
    "snapshot_line",
]

USER_PROPERTY = "genguard"
EVENTS_KEY = pytest.StashKey[list[Event]]()
TALLY_KEY = pytest.StashKey["Tally"]()


@dataclass(frozen=True)
class Seen:
    """One check the summary can name with -v: which test, which snapshot, what it said."""

    nodeid: str
    kind: str  # snapshot, verify, reference, invariant
    verdict: Verdict | Status  # for invariants Status.OK / Status.FAILED
    name: str  # snapshot or invariant name
    summary: str  # first line of the detail
    test_outcome: str  # "passed", "failed" or "skipped": the outcome of the test that made the check
    failure: bool  # the check did not hold


@dataclass
class Tally:
    """Counts for the terminal summary, added up from reports (so it works under xdist too)."""

    verdicts: Counter[Verdict | Status] = field(default_factory=Counter)  # of snapshot checks
    checks: Counter[str] = field(default_factory=Counter)  # kind -> checks seen (snapshot, verify, reference, ...)
    failed: Counter[str] = field(default_factory=Counter)  # kind -> checks that did not hold in failed tests
    misses: Counter[str] = field(default_factory=Counter)  # kind -> checks that did not hold in tests that passed
    invariants_checked: int = 0
    invariants_failed: int = 0
    fragile_steps: int = 0
    fragile: list[tuple[str, FragileStep]] = field(default_factory=list)  # (node id, fragile step)
    stale_tests: list[str] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)
    updates: list[tuple[str, CheckEvent]] = field(default_factory=list)  # re-recorded snapshots: (node id, event)
    failures: list[tuple[str, CheckEvent | InvariantEvent]] = field(default_factory=list)  # for the HTML report
    used: bool = False
    pins_used: set[str] = field(default_factory=set)  # pin folders any test loaded or wrote
    pins_written: list[tuple[str, PinEvent]] = field(default_factory=list)  # created or re-pinned: (node id, event)
    change: SuiteChange = field(default_factory=SuiteChange)  # what the comparisons found changed, across the run
    pending: list[tuple[str, CheckEvent]] = field(default_factory=list)  # new traces kept for review: (node id, event)

    def add(self, nodeid: str, events: Sequence[Event], outcome: str = "failed") -> None:
        """Add a test's events; `outcome` is its report's ("passed", "failed", "skipped" for xfail)."""
        for event in events:
            if isinstance(event, PinEvent):  # not a check: loading a pin is no reason for a summary
                self.pins_used.add(event.folder)
                if event.action != "loaded" and all(e.folder != event.folder for _, e in self.pins_written):
                    self.pins_written.append((nodeid, event))
                continue
            self.used = True
            if isinstance(event, RecordEvent):
                self.fragile_steps += event.fragile_steps
                self.fragile += [(nodeid, step) for step in event.fragile]
                continue
            if isinstance(event, InvariantEvent):
                self.invariants_checked += 1
                verdict: Verdict | Status = Status.OK if event.ok else Status.FAILED
            else:
                verdict = event.verdict
                if event.change is not None:
                    self.change.add(nodeid, Change.from_json(event.change))
                if event.pending is not None and outcome == "failed":
                    self.pending.append((nodeid, event))
                if event.kind == "snapshot":
                    self.verdicts[verdict] += 1
                    if verdict is Verdict.STALE:
                        self.stale_tests.append(nodeid)
                    if verdict is Status.UPDATED:
                        self.updates.append((nodeid, event))
            if verdict is Status.RECORDED:  # recording a reference checks nothing
                continue
            self.checks[event.kind] += 1
            self.seen.append(Seen(nodeid, event.kind, verdict, event.name, event.summary, outcome, event.failure))
            if not event.failure:
                continue
            if outcome == "failed":
                self.failed[event.kind] += 1
                if isinstance(event, InvariantEvent):
                    self.invariants_failed += 1
                self.failures.append((nodeid, event))
            else:
                self.misses[event.kind] += 1


# ------------------------------------------------------------------------------------------------------ counting

# Snapshot verdicts in the order the summary line names them (matched = identical + within tolerance).
_EXTRA_VERDICTS = (
    (Status.INVALID, "unreadable"),
    (Status.MISSING, "missing"),
    (Status.NON_FINITE, "with non-finite values"),
    (Status.WRITE_ERROR, "not written (write error)"),
    (Status.CREATED, "created"),
    (Status.UPDATED, "updated"),
)


def snapshot_line(tally: Tally) -> str:
    """Snapshot verdicts: matched (identical or within tolerance), tolerated divergences, stale, regressed, and the
    unreadable, missing, created and updated ones when there are any."""
    v = tally.verdicts
    matched = v[Verdict.IDENTICAL] + v[Verdict.WITHIN_TOLERANCE]
    line = (
        f"snapshots: {matched} matched, {plural(v[Verdict.TOLERATED], 'tolerated divergence')}, "
        f"{v[Verdict.STALE]} stale, {v[Verdict.REGRESSION]} regressed"
    )
    for verdict, label in _EXTRA_VERDICTS:
        if v[verdict]:
            line += f", {v[verdict]} {label}"
    n = tally.misses["snapshot"]
    return line + (f" ({n} of them did not hold in tests that passed: those tests expected it)" if n else "")


def count_blocks(tally: Tally) -> list[tuple[str, str]]:
    """(kind, counting line) for each kind of check that ran."""
    blocks = []
    if tally.checks["snapshot"]:
        blocks.append(("snapshot", snapshot_line(tally)))
    for kind, label in (("verify", "teacher-forced verifications"), ("reference", "reference comparisons")):
        if tally.checks[kind]:
            blocks.append(
                (kind, f"{label}: {tally.checks[kind]} checked, {tally.failed[kind]} failed{_held(tally, kind)}")
            )
    if tally.invariants_checked:
        line = f"invariants: {tally.invariants_checked} checked, {tally.invariants_failed} failed"
        blocks.append(("invariant", line + _held(tally, "invariant")))
    return blocks


def _held(tally: Tally, kind: str) -> str:
    n = tally.misses[kind]
    return f", {n} did not hold in tests that passed (those tests expected it)" if n else ""


def counts_lines(tally: Tally) -> list[str]:
    """The counting lines of the summary (also the header of the HTML report)."""
    return [line for _, line in count_blocks(tally)]


def _row(nodeid: str, event: CheckEvent | InvariantEvent) -> Row:
    if isinstance(event, InvariantEvent):
        return Row(nodeid, str(Status.FAILED), "", event.summary, kind="invariant")
    change = Change.from_json(event.change) if event.change is not None else None
    first = change.first if change is not None else None
    why = change.why if change is not None and change.why and event.via != "fidelity" else event.summary
    reason = change.why if change is not None and event.verdict is Verdict.STALE else ""
    where = "" if first is None else first.where()
    return Row(nodeid, str(event.verdict), where, why, event.pending, event.kind, reason)


def run_summary(tally: Tally) -> RunSummary:
    """The run as `core.markdown` renders it: the failed checks, the counting lines, what the change did."""
    rows = tuple(_row(nodeid, event) for nodeid, event in tally.failures)
    checks = sum(tally.checks.values())
    return RunSummary(checks, tuple(counts_lines(tally)), rows, tuple(tally.change.lines()))
