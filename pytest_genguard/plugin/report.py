"""The run's HTML report (``--genguard-report PATH``): every failed genguard check of the run drawn in full with
`pytest_genguard.core.html` (expected and actual side by side, the divergence marked, the command that re-records),
or a short page when all checks held.
"""

from __future__ import annotations

import datetime as _dt
import shlex
from pathlib import Path

import pytest

from pytest_genguard.core.change import Change
from pytest_genguard.core.compare import compare
from pytest_genguard.core.errors import TraceFormatError
from pytest_genguard.core.events import CheckEvent, InvariantEvent
from pytest_genguard.core.files import atomic_write_text
from pytest_genguard.core.html import Page, badge, document, escape, toolbar
from pytest_genguard.core.markdown import embed
from pytest_genguard.core.text import plural
from pytest_genguard.core.tolerances import Overrides
from pytest_genguard.core.trace import GenerationTrace
from pytest_genguard.core.verdict import Rerecord, Status, Verdict
from pytest_genguard.plugin.settings import settings
from pytest_genguard.plugin.tally import Tally, counts_lines, run_summary

__all__ = ["fix_command", "render_run_report", "report_target", "write_run_report"]


def _parse(text: str | None, source: str) -> GenerationTrace | str:
    """The trace, or the reason it cannot be drawn."""
    if text is None:
        return f"{source}: no trace recorded"
    try:
        return GenerationTrace.from_json(text, source=source)
    except TraceFormatError as exc:
        return str(exc)


def _failure(page: Page, nodeid: str, event: CheckEvent | InvariantEvent, tolerances: Overrides) -> str:
    verdict = str(event.verdict) if isinstance(event, CheckEvent) else str(Status.FAILED)
    label = event.kind + (f" {event.name}" if event.name else "")
    parts = [f'<section class="f"><h2>{escape(nodeid)}</h2><div>{badge(verdict)} {escape(label)}']
    if isinstance(event, CheckEvent) and event.reference:
        parts.append(f' <span class="muted">reference {escape(event.reference)}</span>')
    parts.append(f'</div><p class="sum">{escape(event.summary)}</p>')
    command = fix_command(nodeid, event)
    if command is not None:
        parts.append(f'<p class="fix">{escape(command[0])}: <code>{escape(command[1])}</code></p>')
    if isinstance(event, CheckEvent) and event.pending is not None:
        parts.append(
            '<p class="fix">or accept the new trace this run kept, without running the model again: '
            f"<code>genguard review --accept {escape(event.pending)}</code></p>"
        )
    change = Change.from_json(event.change) if isinstance(event, CheckEvent) and event.change else None
    kld = change.kld if change is not None else None
    if isinstance(event, CheckEvent) and event.expected is None and kld is not None and kld.per_step:
        parts.append(page.kld_only(kld))  # a model judged in process: its KLD per step, no second trace
    if isinstance(event, CheckEvent) and (event.expected is not None or event.actual is not None):
        expected = _parse(event.expected, f"{nodeid} (expected)")
        actual = _parse(event.actual, f"{nodeid} (actual)")
        if isinstance(expected, GenerationTrace) and isinstance(actual, GenerationTrace) and event.via == "fidelity":
            parts.append(page.fidelity(expected, actual, kld))  # judged by a budget, not by the float rule
        elif isinstance(expected, GenerationTrace) and isinstance(actual, GenerationTrace):
            # verify() compares values of a model on purpose: its fingerprints are not the verdict
            cmp = compare(expected, actual, check_fingerprints=event.kind != "verify", **tolerances.args())
            parts.append(page.comparison(cmp))
        else:
            for side in (expected, actual):
                parts.append(f"<p>{escape(side)}</p>" if isinstance(side, str) else page.trace(side))
    if isinstance(event, CheckEvent) and event.detail:
        parts.append(f"<details><summary>full message</summary><pre>{escape(event.detail)}</pre></details>")
    parts.append("</section>")
    return "".join(parts)


def fix_command(nodeid: str, event: CheckEvent | InvariantEvent) -> tuple[str, str] | None:
    """(what it does, the command) for a failed check: what re-records a snapshot, a baseline or a reference; for an
    invariant, the command that re-runs the test."""
    target = f" {shlex.quote(nodeid)}" if nodeid else ""
    if isinstance(event, CheckEvent) and event.kind == "reference" and event.reference:
        folder = Path(event.reference).parent.parent
        return "if the change is intended, re-record the reference (in the reference environment)", (
            f"pytest --genguard-record-reference {shlex.quote(str(folder))}{target}"
        )
    if isinstance(event, CheckEvent):
        command = Rerecord((nodeid,) if nodeid else (), per_env=event.per_env).command(event.verdict)
        if command is not None and event.verdict is Verdict.STALE:
            return "if the model, tokenizer, settings or prompts changed on purpose, re-record", command
        if command is not None:
            return "if the new behaviour is intended, re-record", command
    return ("re-run it", f"pytest{target}") if nodeid else None


def render_run_report(
    tally: Tally, *, title: str = "genguard report", context: str = "", tolerances: Overrides = Overrides()
) -> str:
    """The run's report: every failed check drawn in full, or a short page when all checks held."""
    checks = sum(tally.checks.values())
    page = Page()
    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    subtitle = escape(f"{context} {stamp}".strip())
    counts = "<br>".join(escape(line) for line in counts_lines(tally))
    if not tally.failures:
        body = f'<section class="f"><h2>{badge("held")} all {checks} checks held</h2><p>{counts}</p>{_change(tally)}'
        return document(title, subtitle, body + f"</section>{embed(run_summary(tally))}")
    body = f"<p><b>{len(tally.failures)} of {checks} checks failed.</b><br>{counts}</p>" + _change(tally) + toolbar()
    body += "".join(_failure(page, nodeid, event, tolerances) for nodeid, event in tally.failures)
    return document(title, subtitle, body + embed(run_summary(tally)))


def _change(tally: Tally) -> str:
    """What the change did across the run (the summary's lines), and the pending traces' review command."""
    lines = tally.change.lines()
    if tally.pending:
        lines.append(
            f"{plural(len(tally.pending), 'new trace')} kept for review: genguard review (where the tests ran)"
        )
    return '<ul class="change">' + "".join(f"<li>{escape(line)}</li>" for line in lines) + "</ul>" if lines else ""


def report_target(config: pytest.Config, path: Path) -> Path:
    """Where `--genguard-report PATH` goes: relative paths are taken from the directory pytest was started in."""
    return path if path.is_absolute() else config.invocation_params.dir / path


def write_run_report(config: pytest.Config, tally: Tally, path: Path) -> None:
    """Write the run's report to `path` atomically."""
    target = report_target(config, path)
    context = f"pytest {' '.join(config.invocation_params.args)} in {config.rootpath} —"
    text = render_run_report(tally, context=context, tolerances=settings(config).tolerance_overrides())
    atomic_write_text(target, text)
