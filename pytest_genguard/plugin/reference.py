"""Cross-environment workflows: reference traces (`--genguard-record-reference` / `--genguard-reference`) and the
helpers for environment-keyed baselines (`--genguard-baselines per-env`).

Reference traces: the snapshot fixture hands every trace it compares to `on_trace()`. With
`--genguard-record-reference DIR` the trace is written to DIR (one file per test node id and snapshot index, written
atomically, plus `environment.json`); with `--genguard-reference DIR` it is compared with the trace recorded there:
bitwise when both come from the same environment (`environment.same_environment`), with the tolerant rule otherwise.
Each prompt is reported as identical, within tolerance, a tolerated near-tie divergence (step, margin) or a
regression, as `reference` events and in a `genguard-reference` terminal section; a regression fails the test.

(Environment-keyed baselines, ``--genguard-baselines per-env``, are a snapshot store: `pytest_genguard.plugin.stores`.)
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pytest_genguard.core import events
from pytest_genguard.core.compare import compare
from pytest_genguard.core.comparison import Comparison, render
from pytest_genguard.core.environments import environment_class, numeric_diff, same_environment
from pytest_genguard.core.errors import TraceFormatError
from pytest_genguard.core.events import CheckEvent
from pytest_genguard.core.files import atomic_write_text
from pytest_genguard.core.jsontext import JSONScalar
from pytest_genguard.core.tolerances import EXACT, Overrides, Tolerances, default_tolerances
from pytest_genguard.core.trace import GenerationTrace
from pytest_genguard.core.verdict import Status, Verdict
from pytest_genguard.plugin.settings import settings
from pytest_genguard.plugin.tally import EVENTS_KEY, USER_PROPERTY

ENVIRONMENT_FILE = "environment.json"

# ------------------------------------------------------------------------------------------------------ files

_UNSAFE = re.compile(r"[^A-Za-z0-9._\-\[\]=+,]")


def _safe(text: str, limit: int = 100) -> str:
    safe = _UNSAFE.sub("_", text).strip(".") or "_"
    if safe != text or len(safe) > limit:  # keep names unique after replacing/cutting characters
        safe = f"{safe[:limit]}-{hashlib.sha1(text.encode()).hexdigest()[:8]}"
    return safe


def reference_path(directory: str | os.PathLike[str], nodeid: str, index: int | str) -> Path:
    """The reference file of snapshot `index` of test `nodeid`: DIR/<test file>/<test name>.<index>.json."""
    file_part, _, test_part = nodeid.partition("::")
    return Path(directory) / _safe(file_part.replace("/", "__")) / f"{_safe(test_part or 'module')}.{index}.json"


def read_environment_file(directory: Path) -> dict[str, Any]:
    """The `environment.json` of a reference directory; a UsageError names the file and the fix."""
    path = directory / ENVIRONMENT_FILE
    record_hint = f"record reference traces with: pytest --genguard-record-reference {directory}"
    if not directory.is_dir():
        raise pytest.UsageError(f"--genguard-reference {directory}: no such directory; {record_hint}")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise pytest.UsageError(
            f"--genguard-reference {directory}: {path} is missing, so this is not a reference directory; {record_hint}"
        ) from None
    except (OSError, ValueError) as exc:
        raise pytest.UsageError(f"--genguard-reference: cannot read {path} ({exc}); {record_hint}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("environment"), dict):
        raise pytest.UsageError(f"--genguard-reference: {path} has no 'environment' object; {record_hint}")
    return doc


# ------------------------------------------------------------------------------------------------------ outcomes


@dataclass(frozen=True)
class PromptOutcome:
    """How one prompt of the current run compares with its reference."""

    index: int
    prompt: str
    outcome: str
    """"identical", "within tolerance", "tolerated near-tie divergence", "regression" or "stale"."""
    step: int | None = None
    margin: float | None = None
    gap: float | None = None
    detail: str = ""

    def describe(self) -> str:
        text = f"prompt {self.index} {self.prompt!r}: {self.outcome}"
        if self.outcome == "tolerated near-tie divergence":
            return f"{text} at step {self.step} (margin {self.margin:.3g}, gap {self.gap:.3g})"
        if self.step is not None:
            return f"{text} at step {self.step} ({self.detail})"
        return text


def prompt_outcomes(comparison: Comparison) -> list[PromptOutcome]:
    """Per prompt classification of a `compare()` result."""
    by_prompt = {d.prompt_index: d for d in comparison.divergences}
    prompts = comparison.actual.prompts or comparison.expected.prompts
    out = []
    for i, verdict in enumerate(comparison.prompt_verdicts):
        text = prompts[i].prompt if i < len(prompts) else ""
        div = by_prompt.get(i)
        if verdict is None:
            out.append(PromptOutcome(i, text, "stale", detail="prompt list changed"))
        elif div is None:
            out.append(PromptOutcome(i, text, str(verdict)))
        elif verdict == Verdict.TOLERATED:
            out.append(PromptOutcome(i, text, "tolerated near-tie divergence", div.step, div.expected_margin, div.gap))
        else:
            out.append(PromptOutcome(i, text, "regression", div.step, div.expected_margin, div.gap, div.detail))
    return out


def reference_tolerances(
    expected: GenerationTrace, actual: GenerationTrace, overrides: Overrides = Overrides()
) -> Tolerances:
    """Bitwise (`compare.EXACT`) within one environment, the dtype defaults across environments; explicit
    `overrides` (atol/rtol/tie_tol from the ini or a `genguard` marker) apply on top of either."""
    same = same_environment(expected.environment, actual.environment)
    base = EXACT if same else default_tolerances(expected, actual)
    return overrides.on(base)


def check_reference(path: Path, trace: GenerationTrace, overrides: Overrides = Overrides()) -> CheckEvent:
    """Compare `trace` with the reference at `path`: the `reference` event."""
    name = path.name
    try:
        expected = GenerationTrace.from_json(path.read_text(encoding="utf-8"), source=str(path))
    except TraceFormatError as exc:
        return _failure(path, f"unreadable reference trace {path}", str(exc))
    tol = reference_tolerances(expected, trace, overrides)
    comparison = compare(expected, trace, tolerances=tol, allow_dtype_change=overrides.allow_dtype_change)
    outcomes = prompt_outcomes(comparison)
    bitwise = same_environment(expected.environment, trace.environment)
    env_diff = numeric_diff(comparison.environment_diff)
    rule = "bitwise (same environment)" if bitwise else f"tolerant rule ({tol})"
    where = f"{environment_class(expected.environment)} -> {environment_class(trace.environment)}"
    summary = f"reference {comparison.verdict} ({where}, {rule})"
    fix = f"pytest --genguard-record-reference {path.parent.parent} (in the reference environment)"
    detail = "\n".join([f"{summary}: {path}", *(o.describe() for o in outcomes), "", render(comparison, fix=fix)])
    failed = not comparison.ok
    return CheckEvent(
        "reference",
        comparison.verdict,
        failed,
        summary,
        detail,
        name,
        expected=expected.to_json() if failed else None,
        actual=trace.to_json() if failed else None,
        reference=str(path),
        bitwise=bitwise,
        environment_diff=env_diff,
        prompts=tuple(dataclasses.asdict(o) for o in outcomes),
    )


def _failure(path: Path, summary: str, detail: str) -> CheckEvent:
    return CheckEvent("reference", Status.MISSING, True, summary, detail, path.name, reference=str(path), prompts=())


# ------------------------------------------------------------------------------------------------------ the hook


def on_trace(
    config: pytest.Config,
    nodeid: str,
    index: int | str,
    trace: GenerationTrace,
    *,
    overrides: Overrides = Overrides(),
) -> None:
    """Called by the snapshot fixture for every trace it compares: record it and/or compare it with its reference.

    Never raises for a mismatch: it emits a `reference` event, and the reference plugin fails the test after its
    call phase (so a snapshot failure in the same assertion is not hidden). A no-op without the reference options.
    """
    current = settings(config)
    nodeid = _from_project_root(config.rootpath, current.rootdir, nodeid)
    if current.record_reference is not None:
        path = reference_path(current.record_reference, nodeid, index)
        atomic_write_text(path, trace.to_json())
        _write_environment(config, current.record_reference, trace)
        events.emit(
            CheckEvent("reference", Status.RECORDED, False, f"recorded {path}", "", path.name, reference=str(path))
        )
    if current.reference is not None:
        path = reference_path(current.reference, nodeid, index)
        if not path.is_file():
            hint = (
                f"no reference trace for {nodeid} (snapshot {index}): {path} does not exist. Record it in the "
                f"reference environment with: pytest {nodeid.split('::')[0]} --genguard-record-reference "
                f"{current.reference}"
            )
            events.emit(_failure(path, f"missing reference trace {path}", hint))
            return
        events.emit(check_reference(path, trace, overrides.over(current.tolerance_overrides())))


def _from_project_root(rootpath: Path, project: Path, nodeid: str) -> str:
    """`nodeid` with its file part relative to the project's rootdir (`settings.project_root`), where pytest's
    moved away from it: reference files are keyed by it, and must not move with the reference folder."""
    if rootpath == project:
        return nodeid
    file_part, sep, rest = nodeid.partition("::")
    try:
        file_part = (rootpath / file_part).relative_to(project).as_posix()
    except ValueError:
        return nodeid
    return file_part + sep + rest


_ENV_WRITTEN_KEY = pytest.StashKey[bool]()


def _write_environment(config: pytest.Config, directory: Path, trace: GenerationTrace) -> None:
    """environment.json: the environment of the recording run (from its first trace; each process writes once)."""
    if config.stash.get(_ENV_WRITTEN_KEY, False):
        return
    doc = {"environment_class": environment_class(trace.environment), "environment": dict(trace.environment)}
    atomic_write_text(directory / ENVIRONMENT_FILE, json.dumps(doc, indent=2, sort_keys=True) + "\n")
    config.stash[_ENV_WRITTEN_KEY] = True


# ------------------------------------------------------------------------------------------------------ the plugin


def configure_reference(config: pytest.Config) -> None:
    """`pytest_configure` for the reference options: check the directories, register the reporting plugin."""
    current = settings(config)
    ref, rec = current.reference, current.record_reference
    if ref is not None and rec is not None and ref.resolve() == rec.resolve():
        raise pytest.UsageError(
            f"--genguard-reference and --genguard-record-reference both name {ref}: recording would overwrite the "
            "references being compared against; use two directories."
        )
    if rec is not None and rec.exists() and not rec.is_dir():
        raise pytest.UsageError(f"--genguard-record-reference {rec}: exists and is not a directory; name a directory.")
    reference_env = read_environment_file(ref) if ref is not None else None
    if not config.pluginmanager.has_plugin("genguard-reference"):
        config.pluginmanager.register(ReferencePlugin(config, reference_env), "genguard-reference")


class ReferencePlugin:
    """Fails tests whose traces regressed against their references; reports every prompt's outcome."""

    def __init__(self, config: pytest.Config, reference_env: dict[str, Any] | None) -> None:
        self.config = config
        self.reference_env = reference_env
        self.events: list[tuple[str, CheckEvent]] = []

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        current = settings(config)
        lines = []
        if current.record_reference is not None:
            lines.append(f"genguard: recording reference traces to {current.record_reference}")
        if current.reference is not None and self.reference_env is not None:
            env = self.reference_env.get("environment", {})
            lines.append(
                f"genguard: comparing with reference traces in {current.reference} (recorded on "
                f"{self.reference_env.get('environment_class')}: torch {env.get('torch')}, device {env.get('device')})"
            )
        return lines

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, object, object]:
        result = yield
        failed = [
            e
            for e in item.stash.get(EVENTS_KEY, [])
            if isinstance(e, CheckEvent) and e.kind == "reference" and e.failure
        ]
        if failed:
            pytest.fail("\n\n".join(e.detail for e in failed), pytrace=False)
        return result

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for name, value in report.user_properties:
            if name == USER_PROPERTY and isinstance(value, list):
                found = [events.from_json(e) for e in value if e.get("kind") == "reference"]
                self.events += [(report.nodeid, e) for e in found if isinstance(e, CheckEvent)]

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.events:
            return
        write = terminalreporter.write_line
        terminalreporter.section("genguard-reference")
        recorded = [e for _, e in self.events if e.verdict is Status.RECORDED]
        if recorded:
            write(f"recorded {len(recorded)} reference traces to {settings(self.config).record_reference}")
        compared = [(n, e) for n, e in self.events if e.verdict is not Status.RECORDED]
        if not compared:
            return
        counts: dict[str, int] = {}
        lines, diffs = [], {}
        for nodeid, event in compared:
            if event.failure:  # missing, unreadable, stale or regressed: say so before the prompts
                lines.append(f"{nodeid} [{event.name}]: {event.summary}")
            for p in event.prompts or ():
                counts[p["outcome"]] = counts.get(p["outcome"], 0) + 1
                lines.append(f"{nodeid} [{event.name}] " + PromptOutcome(**p).describe())
            for key, old, new in event.environment_diff or ():
                diffs[key] = (old, new)
        failed = sum(1 for _, e in compared if e.failure)
        write(f"reference traces: {len(compared)} compared, {failed} failed")
        if counts:
            write("prompts: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
        for line in lines[:50]:
            write("  " + line)
        if len(lines) > 50:
            write(f"  ... {len(lines) - 50} more")
        if diffs:
            write(
                "environment differences from the reference: "
                + ", ".join(f"{k} {_show(o)} -> {_show(n)}" for k, (o, n) in sorted(diffs.items()))
            )


def _show(value: JSONScalar) -> str:
    return "(unset)" if value is None else str(value)
