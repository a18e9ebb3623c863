"""Run-wide state: the options as typed settings, and the events genguard checks emit for the summary and report.

Settings live in `config.stash`. Library functions (snapshot comparisons, invariants, record()) emit events into the
test that is running through `emit()`; the plugin copies a test's events into its report's `user_properties`, which
pytest-xdist sends from workers to the controller, where `Tally` adds them up for the terminal summary.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

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


def _float_ini(config: pytest.Config, name: str) -> float | None:
    raw = config.getini(name)
    if raw in (None, ""):
        return None
    try:
        return float(str(raw))
    except ValueError:
        raise pytest.UsageError(f"ini option {name} = {raw!r} is not a number; write e.g. {name} = 1e-5") from None


def _path_opt(config: pytest.Config, name: str) -> Path | None:
    value = config.getoption(name)
    return Path(value) if value else None


def settings_from_config(config: pytest.Config) -> Settings:
    cache_ini = str(config.getini("genguard_cache_dir") or "")
    cache_dir = Path(cache_ini) if cache_ini else None
    if cache_dir is not None and not cache_dir.is_absolute():
        cache_dir = config.rootpath / cache_dir
    return Settings(
        gpu=bool(config.getoption("genguard_gpu")),
        update_stale=bool(config.getoption("genguard_update_stale")),
        snapshot_update=bool(config.getoption("update_snapshots", default=False)),
        rebuild=bool(config.getoption("genguard_rebuild")),
        report=_path_opt(config, "genguard_report"),
        reference=_path_opt(config, "genguard_reference"),
        record_reference=_path_opt(config, "genguard_record_reference"),
        baselines=str(config.getoption("genguard_baselines") or "shared"),
        atol=_float_ini(config, "genguard_atol"),
        rtol=_float_ini(config, "genguard_rtol"),
        tie_tol=_float_ini(config, "genguard_tie_tol"),
        cache_dir=cache_dir,
        rootdir=config.rootpath,
        pin_dir=config.rootpath / str(config.getini("genguard_pin_dir") or "__genguard_pins__"),
    )


def settings(config: pytest.Config) -> Settings:
    return config.stash.get(SETTINGS_KEY, Settings())


# ------------------------------------------------------------------------------------------------------ events

_current: contextvars.ContextVar[list[dict[str, Any]] | None] = contextvars.ContextVar("genguard_events", default=None)


def emit(kind: str, **data: Any) -> None:
    """Record an event for the running test (a no-op outside a test, e.g. in a script)."""
    events = _current.get()
    if events is not None:
        events.append({"kind": kind, **data})


def begin(item: pytest.Item) -> contextvars.Token[list[dict[str, Any]] | None]:
    events: list[dict[str, Any]] = []
    item.stash[EVENTS_KEY] = events
    return _current.set(events)


def end(token: contextvars.Token[list[dict[str, Any]] | None]) -> None:
    _current.reset(token)


@contextlib.contextmanager
def muted() -> Iterator[None]:
    """Drop the events emitted in the block: an invariant's many internal record() calls are not the test's."""
    token = _current.set(None)
    try:
        yield
    finally:
        _current.reset(token)


@dataclass
class Tally:
    """Counts for the terminal summary, added up from reports (so it works under xdist too)."""

    verdicts: Counter[str] = field(default_factory=Counter)
    checks: Counter[str] = field(default_factory=Counter)  # kind -> checks seen (snapshot, verify, reference, ...)
    failed: Counter[str] = field(default_factory=Counter)  # kind -> checks that failed
    invariants_checked: int = 0
    invariants_failed: int = 0
    fragile_steps: int = 0
    stale_tests: list[str] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)
    used: bool = False

    def add(self, nodeid: str, events: list[dict[str, Any]]) -> None:
        for event in events:
            self.used = True
            kind = event.get("kind")
            if kind == "snapshot":
                verdict = str(event.get("verdict"))
                self.verdicts[verdict] += 1
                if verdict == "stale":
                    self.stale_tests.append(nodeid)
            elif kind == "invariant":
                self.invariants_checked += 1
                if not event.get("ok", True):
                    self.invariants_failed += 1
            elif kind == "record":
                self.fragile_steps += int(event.get("fragile_steps", 0))
            if kind != "record" and event.get("verdict") != "recorded":  # recording a reference checks nothing
                self.checks[str(kind)] += 1
            if event.get("failure"):
                self.failed[str(kind)] += 1
                self.failures.append({"nodeid": nodeid, **event})


def is_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput") or "PYTEST_XDIST_WORKER" in os.environ


def worker_index(config: pytest.Config) -> int:
    """0-based index of this xdist worker ('gw3' -> 3), 0 outside xdist."""
    workerinput = getattr(config, "workerinput", None)
    name = str(workerinput.get("workerid", "gw0")) if isinstance(workerinput, dict) else ""
    name = name or os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    digits = "".join(ch for ch in name if ch.isdigit())
    return int(digits) if digits else 0
