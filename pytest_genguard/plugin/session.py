"""Run-wide state: the options as typed settings, and the events genguard checks emit for the summary and report.

Settings live in `config.stash`. Library functions (snapshot comparisons, invariants, record()) emit events into the
test that is running through `emit()`; the plugin copies a test's events into its report's `user_properties`, which
pytest-xdist sends from workers to the controller, where `Tally` adds them up for the terminal summary.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pytest_genguard.plugin import options

USER_PROPERTY = "genguard"


@dataclass(frozen=True)
class Settings:
    """The genguard options of this run, parsed once."""

    gpu: bool = False
    update_stale: bool = False
    snapshot_update: bool = False
    rebuild: bool = False
    report: Path | None = None
    reference: Path | None = None
    record_reference: Path | None = None
    baselines: str = "shared"
    atol: float | None = None
    rtol: float | None = None
    tie_tol: float | None = None
    cache_dir: Path | None = None
    rootdir: Path = field(default_factory=Path.cwd)
    pin_dir: Path = field(default_factory=lambda: Path.cwd() / "__genguard_pins__")

    def tolerance_overrides(self) -> dict[str, float]:
        """The ini tolerances that are set (the rest come from the dtype defaults)."""
        values = {"atol": self.atol, "rtol": self.rtol, "tie_tol": self.tie_tol}
        return {k: v for k, v in values.items() if v is not None}


SETTINGS_KEY = pytest.StashKey[Settings]()
TALLY_KEY = pytest.StashKey["Tally"]()
EVENTS_KEY = pytest.StashKey[list[dict[str, Any]]]()


def _path_opt(config: pytest.Config, name: str) -> Path | None:
    value = config.getoption(name)
    return Path(value) if value else None


CACHE_ENV_VAR = "GENGUARD_CACHE_DIR"  # (cache.ENV_VAR; cache.py is not imported at start-up)
_CACHE_FIX = (
    "name a folder genguard may create and write (ini option genguard_cache_dir, or the environment variable "
    f"{CACHE_ENV_VAR} when pytest's cache is disabled)"
)


def _cache_dir(config: pytest.Config) -> Path | None:
    """The ini `genguard_cache_dir` (relative to the rootdir), checked; the environment variable is checked too when
    it is what the cache will use (no ini value and pytest's cache provider disabled)."""
    cache_ini = str(config.getini("genguard_cache_dir") or "").strip()
    if cache_ini:
        path = Path(cache_ini).expanduser()
        path = path if path.is_absolute() else config.rootpath / path
        what = f"ini option genguard_cache_dir = {cache_ini!r} ({options.where_ini(config, 'genguard_cache_dir')})"
        options.check_folder(path, what, _CACHE_FIX)
        return path
    env = os.environ.get(CACHE_ENV_VAR, "")
    if env and getattr(config, "cache", None) is None:
        options.check_folder(Path(env).expanduser(), f"environment variable {CACHE_ENV_VAR}={env!r}", _CACHE_FIX)
    return None


def _report(config: pytest.Config) -> Path | None:
    """`--genguard-report PATH`, checked where it will be written (not in xdist workers, which never write it)."""
    path = _path_opt(config, "genguard_report")
    if path is not None and not hasattr(config, "workerinput"):
        target = path if path.is_absolute() else config.invocation_params.dir / path
        fix = "name an HTML file in a folder you can write, e.g. --genguard-report genguard-report.html"
        options.check_writable_file(target, f"--genguard-report {path}", fix)
    return path


def _record_reference(config: pytest.Config) -> Path | None:
    path = _path_opt(config, "genguard_record_reference")
    if path is not None:
        options.check_folder(path, f"--genguard-record-reference {path}", "name a folder for the reference traces")
    return path


def settings_from_config(config: pytest.Config) -> Settings:
    """The options of this run, each checked: a bad value is a `pytest.UsageError` naming it (exit code 4)."""
    return Settings(
        gpu=bool(config.getoption("genguard_gpu")),
        update_stale=bool(config.getoption("genguard_update_stale")),
        snapshot_update=bool(config.getoption("update_snapshots", default=False)),
        rebuild=bool(config.getoption("genguard_rebuild")),
        report=_report(config),
        reference=_path_opt(config, "genguard_reference"),
        record_reference=_record_reference(config),
        baselines=str(config.getoption("genguard_baselines") or "shared"),
        atol=options.tolerance_ini(config, "genguard_atol"),
        rtol=options.tolerance_ini(config, "genguard_rtol"),
        tie_tol=options.tolerance_ini(config, "genguard_tie_tol"),
        cache_dir=_cache_dir(config),
        rootdir=config.rootpath,
        pin_dir=config.rootpath / str(config.getini("genguard_pin_dir") or "__genguard_pins__"),
    )


def settings(config: pytest.Config) -> Settings:
    return config.stash.get(SETTINGS_KEY, Settings())


@dataclass(frozen=True)
class Seen:
    """One check the summary can name with -v: which test, which snapshot, what it said."""

    nodeid: str
    kind: str  # snapshot, verify, reference, invariant
    verdict: str  # a Verdict value, "created", "updated", "missing", "invalid", ...; for invariants "ok"/"failed"
    name: str  # snapshot or invariant name
    summary: str  # first line of the detail
    test_outcome: str  # "passed", "failed" or "skipped": the outcome of the test that made the check
    failure: bool  # the check did not hold


@dataclass
class Tally:
    """Counts for the terminal summary, added up from reports (so it works under xdist too).

    A check that did not hold fails only when its test failed: a test may check on purpose that a comparison or an
    invariant fails (a negative control); such checks are counted apart (`misses`), so that an all-passing run
    never reports failures.
    """

    verdicts: Counter[str] = field(default_factory=Counter)
    checks: Counter[str] = field(default_factory=Counter)  # kind -> checks seen (snapshot, verify, reference, ...)
    failed: Counter[str] = field(default_factory=Counter)  # kind -> checks that did not hold in failed tests
    misses: Counter[str] = field(default_factory=Counter)  # kind -> checks that did not hold in tests that passed
    invariants_checked: int = 0
    invariants_failed: int = 0
    fragile_steps: int = 0
    fragile: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (node id, fragile step)
    stale_tests: list[str] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)
    updates: list[dict[str, Any]] = field(default_factory=list)  # re-recorded snapshots: node id, name, was, changes
    failures: list[dict[str, Any]] = field(default_factory=list)  # failure events of failed tests (the HTML report)
    used: bool = False

    def add(self, nodeid: str, events: list[dict[str, Any]], outcome: str = "failed") -> None:
        """Add a test's events; `outcome` is its report's ("passed", "failed", "skipped" for xfail)."""
        for event in events:
            self.used = True
            kind = str(event.get("kind"))
            failure = bool(event.get("failure"))
            if kind == "record":
                self.fragile_steps += int(event.get("fragile_steps", 0))
                self.fragile += [(nodeid, dict(step)) for step in event.get("fragile", [])]
                continue
            verdict = str(event.get("verdict"))
            if kind == "snapshot":
                self.verdicts[verdict] += 1
                if verdict == "stale":
                    self.stale_tests.append(nodeid)
                if verdict == "updated":
                    self.updates.append({"nodeid": nodeid, "name": event.get("name", ""), **_update(event)})
            elif kind == "invariant":
                self.invariants_checked += 1
                verdict = "ok" if event.get("ok", True) else "failed"
            if verdict == "recorded":  # recording a reference checks nothing
                continue
            self.checks[kind] += 1
            name = str(event.get("name", ""))
            summary = str(event.get("summary", verdict))
            self.seen.append(Seen(nodeid, kind, verdict, name, summary, outcome, failure))
            if not failure:
                continue
            if outcome == "failed":
                self.failed[kind] += 1
                if kind == "invariant":
                    self.invariants_failed += 1
                self.failures.append({"nodeid": nodeid, **event})
            else:
                self.misses[kind] += 1


def _update(event: dict[str, Any]) -> dict[str, Any]:
    return {"was": event.get("was", ""), "changes": list(event.get("changes", [])), "file": event.get("file", "")}


def is_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput") or "PYTEST_XDIST_WORKER" in os.environ


def worker_index(config: pytest.Config) -> int:
    """0-based index of this xdist worker ('gw3' -> 3), 0 outside xdist."""
    workerinput = getattr(config, "workerinput", None)
    name = str(workerinput.get("workerid", "gw0")) if isinstance(workerinput, dict) else ""
    name = name or os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    digits = "".join(ch for ch in name if ch.isdigit())
    return int(digits) if digits else 0
