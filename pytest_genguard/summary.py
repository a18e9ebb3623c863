"""The terminal summary: what genguard saw in this run, quiet when genguard was not used."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest

from pytest_genguard import session

_STALE_SHOWN = 10


def _plural(n: int, word: str, plural: str | None = None) -> str:
    return f"{n} {word if n == 1 else (plural or word + 's')}"


def snapshot_line(tally: session.Tally) -> str:
    """Snapshot verdicts: matched (identical or within tolerance), tolerated divergences, stale, regressed."""
    v = tally.verdicts
    matched = v["identical"] + v["within tolerance"]
    line = (
        f"snapshots: {matched} matched, {_plural(v['tolerated divergence'], 'tolerated divergence')}, "
        f"{v['stale']} stale, {v['regression']} regressed"
    )
    for extra in ("created", "updated"):
        if v[extra]:
            line += f", {v[extra]} {extra}"
    return line


def counts_lines(tally: session.Tally) -> list[str]:
    """The counting lines of the summary (also the header of the HTML report)."""
    lines = []
    if tally.checks["snapshot"]:
        lines.append(snapshot_line(tally))
    for kind, label in (("verify", "teacher-forced verifications"), ("reference", "reference comparisons")):
        if tally.checks[kind]:
            lines.append(f"{label}: {tally.checks[kind]} checked, {tally.failed[kind]} failed")
    if tally.invariants_checked:
        lines.append(f"invariants: {tally.invariants_checked} checked, {tally.invariants_failed} failed")
    return lines


def rerecord_command(stale_tests: list[str], *, per_env: bool = False) -> str:
    """The command that re-records only stale snapshots, limited to the files that have them (in per-env mode it
    keeps the option, or the shared snapshots would be rewritten instead of this environment's baselines)."""
    files = sorted({nodeid.split("::", 1)[0] for nodeid in stale_tests})
    options = ["--genguard-baselines", "per-env"] if per_env else []
    return " ".join(["pytest", "--genguard-update-stale", *options, *(shlex.quote(f) for f in files)])


class GenguardReporter:
    """Adds up genguard events from test reports (worker reports too, under xdist) and writes the summary."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.report_written: Path | None = None
        self.report_error: str | None = None

    @property
    def tally(self) -> session.Tally:
        return self.config.stash[session.TALLY_KEY]

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for name, value in report.user_properties:
            if name == session.USER_PROPERTY and isinstance(value, list):
                self.tally.add(report.nodeid, value)

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        tally = self.tally
        if not tally.used and self.report_written is None and self.report_error is None:
            return
        write = terminalreporter.write_line
        terminalreporter.section("genguard")
        for line in counts_lines(tally):
            write(line)
        if not tally.checks and tally.used:
            write("no genguard checks ran")
        if tally.fragile_steps:
            write(
                f"fragile steps seen while recording: {tally.fragile_steps} (top-1/top-2 margin under the tie "
                "tolerance: a tiny numeric change can flip these tokens)"
            )
        if tally.stale_tests:
            write("stale snapshots (the model, tokenizer or decoding settings changed since they were recorded):")
            for nodeid in tally.stale_tests[:_STALE_SHOWN]:
                write(f"  {nodeid}")
            if len(tally.stale_tests) > _STALE_SHOWN:
                write(f"  ... and {len(tally.stale_tests) - _STALE_SHOWN} more")
            per_env = session.settings(config).baselines == "per-env"
            write(f"re-record only the stale snapshots with: {rerecord_command(tally.stale_tests, per_env=per_env)}")
        if self.report_written is not None:
            write(f"HTML report: {self.report_written}")
        if self.report_error is not None:
            write(self.report_error, red=True)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        report = session_settings(self.config).report
        if report is None or hasattr(self.config, "workerinput"):
            return
        from pytest_genguard.report_html import report_target, write_run_report

        target = report_target(self.config, report)
        try:
            write_run_report(self.config, self.tally, target)
        except OSError as exc:
            self.report_error = f"genguard: could not write the HTML report to {target}: {exc}"
        else:
            self.report_written = target


def session_settings(config: pytest.Config) -> session.Settings:
    return session.settings(config)
