"""The terminal summary: what genguard saw in this run, quiet when genguard was not used.

Every count names its items with ``-v`` (which test, which snapshot, which prompt and step). A check that did not hold
counts as failed only when its test failed (see `Tally`). Re-recorded snapshots are always listed with what
the new one changed, and the snapshots kept from deletion by ``--snapshot-update`` are counted (`keep`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from pytest_genguard.core.events import FragileStep, events_from_json
from pytest_genguard.core.pending import PENDING_DIR
from pytest_genguard.core.review import changed_lines
from pytest_genguard.core.text import plural
from pytest_genguard.core.verdict import Rerecord, Status, Verdict
from pytest_genguard.plugin import distributed, keep
from pytest_genguard.plugin.pin_usage import UnusedPins, unused_lines, unused_pins, written_lines
from pytest_genguard.plugin.settings import settings
from pytest_genguard.plugin.step_summary import append_step_summary
from pytest_genguard.plugin.tally import TALLY_KEY, USER_PROPERTY, Tally, count_blocks

_STALE_SHOWN = 10
_UPDATES_SHOWN = 10
_SUMMARY_WIDTH = 160


# Snapshot verdicts in the order the summary line names them (matched = identical + within tolerance).
def rerecord_command(stale_tests: list[str], *, per_env: bool = False) -> str:
    """The command that re-records only stale snapshots, limited to the files that have them (in per-env mode it
    keeps the option, or the shared snapshots would be rewritten instead of this environment's baselines)."""
    files = tuple(sorted({nodeid.split("::", 1)[0] for nodeid in stale_tests}))
    return Rerecord(files, per_env=per_env).command(Verdict.STALE) or ""


def _short(text: str, width: int = _SUMMARY_WIDTH) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _who(nodeid: str, name: str) -> str:
    """The test, and the snapshot when its name is not the test's own (``test_x.1``, ``test_x[name]``)."""
    own = nodeid.rsplit("::", 1)[-1]
    return nodeid if not name or name == own or name.endswith(f".{own}") else f"{nodeid} (snapshot {name})"


# The order of the counting line (matched, tolerated, stale, regressed; invariants that held, then failed): a display
# order, not the severity order (`Verdict.severity`), which puts stale last.
_ORDER: list[Verdict | Status] = [
    Verdict.IDENTICAL,
    Verdict.WITHIN_TOLERANCE,
    Verdict.TOLERATED,
    Verdict.STALE,
    Verdict.REGRESSION,
    Status.OK,
    Status.FAILED,
]


def item_lines(tally: Tally, kind: str) -> list[str]:
    """With -v: one line per check of `kind` (test, snapshot, first line of its explanation), in the order of the
    counting line (matched, tolerated, stale, regressed, then the rest)."""
    seen = [s for s in tally.seen if s.kind == kind]
    seen.sort(key=lambda s: _ORDER.index(s.verdict) if s.verdict in _ORDER else len(_ORDER))
    lines = []
    for item in seen:
        who = item.nodeid if kind == "invariant" else _who(item.nodeid, item.name)
        note = " (did not hold; the test passed)" if item.failure and item.test_outcome != "failed" else ""
        lines.append(f"  {who}: {_short(item.summary)}{note}")
    return lines


def fragile_lines(tally: Tally, verbose: bool) -> list[str]:
    """The fragile-steps count, and with -v each test's fragile steps (prompt, step, margin)."""
    if not tally.fragile_steps:
        return []
    tests = {nodeid for nodeid, _ in tally.fragile}
    where = f" in {plural(len(tests), 'test')}" if tests else ""
    head = (
        f"fragile steps seen while recording: {tally.fragile_steps}{where} (top-1/top-2 margin under the tie "
        "tolerance: a tiny numeric change can flip these tokens)"
    )
    if not verbose:
        return [head + ("; -v names them" if tests else "")]
    lines = [head]
    by_test: dict[str, list[FragileStep]] = {}
    for nodeid, step in tally.fragile:
        by_test.setdefault(nodeid, []).append(step)
    for nodeid, steps in by_test.items():
        parts = [f"prompt {s.prompt} {s.text!r} step {s.step} (margin {s.margin:.2g})" for s in steps]
        lines.append(f"  {nodeid}: {'; '.join(parts)}")
    return lines


def update_lines(tally: Tally, verbose: bool) -> list[str]:
    """Re-recorded snapshots and what each new one changed compared with the old one, for review."""
    if not tally.updates:
        return []
    lines = ["re-recorded snapshots (review what each new one changed compared with the old one):"]
    shown = tally.updates if verbose else tally.updates[:_UPDATES_SHOWN]
    for nodeid, update in shown:
        lines += [f"  {line}" for line in changed_lines(_who(nodeid, update.name), update.was, update.changes or ())]
    if len(tally.updates) > len(shown):
        lines.append(f"  ... and {len(tally.updates) - len(shown)} more (-v lists them all)")
    return lines


def pending_lines(tally: Tally, verbose: bool, folder: str = ".genguard/pending") -> list[str]:
    """The new traces kept for review: how many, where (`folder`), the command that reviews them; with -v each id
    and its test."""
    if not tally.pending:
        return []
    lines = [
        f"{plural(len(tally.pending), 'new trace')} kept for review in {folder} (git ignores it): accept or "
        "reject each with `genguard review` (`--list`, `--accept ID`), without running the model again"
    ]
    if verbose:
        lines += [f"  {event.pending}  {_who(nodeid, event.name)}" for nodeid, event in tally.pending]
    return lines


def _pending_folder(config: pytest.Config) -> str:
    """The pending traces' folder as the user finds it from where pytest started (the rootdir may be above it)."""
    folder = config.rootpath / PENDING_DIR / "pending"
    try:
        return os.path.relpath(folder, config.invocation_params.dir)
    except ValueError:  # another drive (Windows)
        return str(folder)


_KEPT_HEADS = {
    keep.FAILED: "tests that did not reach their assertion (failed, errored or skipped)",
    keep.NOT_RUN: "tests that did not run (the run stopped early)",
    keep.NOT_COLLECTED: "test modules that failed to collect",
}


def kept_lines(kept: list[keep.Kept], rootdir: Path, verbose: bool) -> list[str]:
    """The snapshots genguard kept although no assertion used them, by reason; with -v each file and its test."""
    groups: dict[str, list[keep.Kept]] = {}
    for item in kept:
        group = keep.FAILED if item.why in (keep.FAILED, keep.ERRORED, keep.SKIPPED) else item.why
        groups.setdefault(group, []).append(item)
    lines = []
    for group, head in _KEPT_HEADS.items():
        items = groups.get(group, [])
        if not items:
            continue
        tail = "" if verbose else "; -v names them"
        lines.append(f"kept {plural(len(items), 'snapshot')} of {head}{tail}")
        if verbose:
            for item in items:
                try:
                    path = str(item.path.relative_to(rootdir))
                except ValueError:
                    path = str(item.path)
                owners = ", ".join(item.owners)
                module = "its module was skipped" if item.why == keep.SKIPPED else "its module failed to collect"
                lines.append(f"  {path} ({owners}: {item.why})" if owners else f"  {path} ({module})")
    if lines:
        lines.append("(--snapshot-update deletes only the snapshots of tests that no longer exist)")
    return lines


class GenguardReporter:
    """Adds up genguard events from test reports (worker reports too, under xdist) and writes the summary."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.report_written: Path | None = None
        self.report_error: str | None = None
        self.unused_pins: UnusedPins | None = None
        self.step_summary_error: str | None = None

    @property
    def tally(self) -> Tally:
        return self.config.stash[TALLY_KEY]

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for name, value in report.user_properties:
            if name == USER_PROPERTY and isinstance(value, list):
                self.tally.add(report.nodeid, events_from_json(value), report.outcome)

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        tally = self.tally
        current = settings(config)
        ledger = config.stash.get(keep.LEDGER_KEY, None)
        dirname = str(getattr(config.option, "snapshot_dirname", None) or "__snapshots__")  # syrupy's option
        kept = keep.kept(ledger, dirname) if ledger is not None and current.snapshot_update else []
        pins = written_lines(tally, config.rootpath) + unused_lines(self.unused_pins, config.rootpath)
        if not tally.used and self.report_written is None and self.report_error is None and not kept and not pins:
            return
        verbose = config.get_verbosity() >= 1
        write = terminalreporter.write_line
        terminalreporter.section("genguard")
        for kind, line in count_blocks(tally):
            write(line)
            for item in item_lines(tally, kind) if verbose else []:
                write(item)
        if not tally.checks and tally.used:
            write("no genguard checks ran")
        for line in fragile_lines(tally, verbose):
            write(line)
        for line in tally.change.lines():
            write(line)
        if tally.stale_tests:
            write("stale snapshots (the model, tokenizer or decoding settings changed since they were recorded):")
            for nodeid in tally.stale_tests[:_STALE_SHOWN]:
                write(f"  {nodeid}")
            if len(tally.stale_tests) > _STALE_SHOWN:
                write(f"  ... and {len(tally.stale_tests) - _STALE_SHOWN} more")
            per_env = current.baselines == "per-env"
            write(f"re-record only the stale snapshots with: {rerecord_command(tally.stale_tests, per_env=per_env)}")
        for line in pending_lines(tally, verbose, _pending_folder(config)):
            write(line)
        for line in update_lines(tally, verbose):
            write(line)
        for line in kept_lines(kept, config.rootpath, verbose):
            write(line)
        for line in pins:
            write(line)
        if self.report_written is not None:
            write(f"HTML report: {self.report_written}")
        if self.report_error is not None:
            write(self.report_error, red=True)
        if self.step_summary_error is not None:
            write(self.step_summary_error, red=True)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if hasattr(self.config, "workerinput") or distributed.follower():  # the controller, or torchrun's rank 0
            return
        current = settings(self.config)
        ledger = self.config.stash.get(keep.LEDGER_KEY, None)
        if ledger is not None and exitstatus != pytest.ExitCode.INTERRUPTED:
            self.unused_pins = unused_pins(self.config, session, current, self.tally, ledger)
        self.step_summary_error = append_step_summary(self.config, self.tally)
        report = current.report
        if report is None:
            return
        from pytest_genguard.plugin.report import report_target, write_run_report  # only with --genguard-report

        target = report_target(self.config, report)
        try:
            write_run_report(self.config, self.tally, target)
        except OSError as exc:  # checked at start-up; this is a fault during the run (a full disk, a removed folder)
            self.report_error = f"genguard: could not write the HTML report to {target}: {exc}"
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
        else:
            self.report_written = target
