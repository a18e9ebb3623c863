"""Where a `genguard_snapshot` assertion reads what it compares with and writes what it records: the *stores*.

- `SharedStore`: the snapshot in ``__snapshots__/<test module>/<name>.genguard``, read and written through syrupy
  (which also counts the assertion and deletes unused files on ``--snapshot-update``).
- `BaselineStore` (``--genguard-baselines per-env``): a trace is compared with the baseline of its environment class
  (``cpu-float32``, ``cuda12.6-sm90-bfloat16``), kept in ``<test dir>/__genguard_baselines__/<class>/<test
  module>/<name>.genguard``, outside ``__snapshots__`` because syrupy deletes the files there that no assertion
  claims. When the class has no baseline yet, the nearest one is used (`pick_baseline`: same device type and dtype
  with the nearest GPU capability and the same CUDA toolkit, then the same dtype), else the shared snapshot; writes
  go only to this class's own baseline, never to the fallback. Each file belongs to one test, which pytest-xdist
  runs in one worker, so an atomic write suffices, with no lock. syrupy keeps tracking the shared snapshot
  read-only, so a shared file stays "used": it counts the assertion as passed or failed, never as written.

The fixture (`snapshot_fixture.GenguardSnapshot`) decides, through one path for both, whether to write.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import pytest

from pytest_genguard.core.files import write_snapshot
from pytest_genguard.core.verdict import Status
from pytest_genguard.plugin import distributed, keep
from pytest_genguard.plugin.snapshot import Plan
from pytest_genguard.plugin.syrupy_adapter import SyrupyAssertion

if TYPE_CHECKING:
    from syrupy.assertion import AssertionResult, SnapshotAssertion

__all__ = [
    "BASELINES_DIR",
    "Baseline",
    "BaselineStore",
    "SharedStore",
    "Store",
    "Syrupy",
    "Written",
    "available_baselines",
    "file_in_the_way",
    "per_env_location",
    "pick_baseline",
    "resolve_baseline",
    "write_by_rank_zero",
]

BASELINES_DIR = "__genguard_baselines__"
"""Per-environment baselines live beside ``__snapshots__``, not in it: syrupy treats every file under a snapshot
directory that no extension of the run claims as an unused snapshot and deletes it on ``--snapshot-update``."""

# ------------------------------------------------------------------------------------------------------ locations

_CLASS_RE = re.compile(
    r"^(?P<device>[a-z][a-z_]*)(?P<toolkit>[0-9]+(?:\.[0-9]+)*)?(?:-sm(?P<sm>[0-9]+))?-(?P<dtype>[a-z][a-z0-9]*)$"
)


@dataclass(frozen=True)
class _Class:
    """An environment class's parts (`core.environments.environment_class`): 'cuda12.6-sm90-bfloat16'."""

    device: str
    toolkit: str | None
    sm: int | None
    dtype: str


def _parse_class(name: str) -> _Class | None:
    match = _CLASS_RE.match(name)
    if match is None:
        return None
    sm = match.group("sm")
    return _Class(match.group("device"), match.group("toolkit"), int(sm) if sm else None, match.group("dtype"))


def pick_baseline(env_class: str, available: Iterable[str]) -> str | None:
    """The baseline to compare an `env_class` trace with, from the environment classes that have one; None = shared.

    Nearest first: the same class; else the same device type and dtype (on CUDA the nearest compute capability,
    the higher one on a tie, then the same CUDA toolkit); else the same dtype on any device (alphabetical); else
    None, the shared snapshot. Names that are not environment classes are ignored.
    """
    own = _parse_class(env_class)
    if own is None:
        raise ValueError(f"pick_baseline: {env_class!r} is not an environment class (e.g. 'cpu-float32')")
    parsed = {name: p for name in set(available) if (p := _parse_class(name)) is not None}
    if env_class in parsed:
        return env_class
    same_device = [n for n, c in parsed.items() if c.device == own.device and c.dtype == own.dtype]
    if same_device:

        def distance(name: str) -> tuple[int, int, bool, str]:
            c = parsed[name]
            return abs((c.sm or 0) - (own.sm or 0)), -(c.sm or 0), c.toolkit != own.toolkit, name

        return min(same_device, key=distance)
    same_dtype = sorted(n for n, c in parsed.items() if c.dtype == own.dtype)
    return same_dtype[0] if same_dtype else None


def per_env_location(location: str | os.PathLike[str], env_class: str) -> Path:
    """Where the `env_class` baseline of the shared snapshot file `location` lives.

    ``tests/__snapshots__/test_gen/test_x.genguard`` ->
    ``tests/__genguard_baselines__/cuda-sm90-bfloat16/test_gen/test_x.genguard``.
    """
    if _parse_class(env_class) is None:
        raise ValueError(f"per_env_location: {env_class!r} is not an environment class (e.g. 'cpu-float32')")
    path = Path(location)
    snapshots = path.parent.parent
    return snapshots.parent / BASELINES_DIR / env_class / path.parent.name / path.name


def available_baselines(location: str | os.PathLike[str]) -> list[str]:
    """The environment classes that have a baseline for the shared snapshot file `location` (sorted)."""
    path = Path(location)
    root = path.parent.parent.parent / BASELINES_DIR
    if not root.is_dir():
        return []
    return sorted(
        d.name
        for d in root.iterdir()
        if d.is_dir() and _parse_class(d.name) and (d / path.parent.name / path.name).is_file()
    )


def resolve_baseline(location: str | os.PathLike[str], env_class: str) -> tuple[Path, str | None]:
    """The file to compare an `env_class` trace with, and the class it belongs to (None: the shared snapshot)."""
    chosen = pick_baseline(env_class, available_baselines(location))
    return (per_env_location(location, chosen), chosen) if chosen else (Path(location), None)


# ------------------------------------------------------------------------------------------------------ syrupy


class Syrupy(SyrupyAssertion):
    """The test's syrupy assertion (`syrupy_adapter.SyrupyAssertion`), plus the ledger of files asserted."""

    def __init__(self, snapshot: SnapshotAssertion, config: pytest.Config, plan: Plan) -> None:
        super().__init__(snapshot, plan)
        self.config = config

    def run(
        self, data: Any, *, update: bool, forced: bool | None = None, read_from: Path | None = None
    ) -> AssertionResult:
        """Run syrupy's assertion (it writes when `update` and the data does not match: `forced=False` makes sure);
        `read_from` makes it read that file instead of the shared snapshot (per-env baselines)."""
        result = super().run(data, update=update, forced=forced, read_from=read_from)
        ledger = self.config.stash.get(keep.LEDGER_KEY, None)
        if ledger is not None:  # this file was asserted: --snapshot-update's keeping does not apply (see keep.py)
            ledger.asserted.add(str(result.snapshot_location))
        return result


# ------------------------------------------------------------------------------------------------------ stores


@dataclass(frozen=True)
class Written:
    """What a store wrote: created or updated, which file (relative to the rootdir), and the text that says so."""

    status: Status
    file: str
    detail: str


class Store(Protocol):
    """Where one assertion reads and writes (see the module docstring)."""

    source: str
    """The file compared with, relative to the rootdir (for messages)."""
    target: str
    """The file writes go to, relative to the rootdir (a pending trace is kept for it)."""

    @property
    def own_exists(self) -> bool:
        """Whether the file writes go to exists (else a write creates it)."""

    def read(self) -> str | None:
        """The stored text compared with; None when there is none; OSError when it exists but cannot be read."""

    def write(self, data: Any, text: str, was: str | None) -> Written:
        """Write `text` (the serialized `data`); `was` is the old verdict (None: nothing was compared). Raises
        OSError when the write fails (nothing half-written)."""

    def count(self, data: Any, ok: bool) -> None:
        """Let syrupy count the assertion as passed or failed, writing nothing."""

    def annotate(self, lines: list[str]) -> list[str]:
        """The explanation with what was compared with named (per-env: which baseline)."""

    def fields(self) -> dict[str, Any]:
        """The event fields of this store (per-env: environment class, baseline, baseline file)."""

    def write_fields(self) -> dict[str, Any]:
        """The event fields of a write."""


class SharedStore:
    """The shared snapshot, read and written by syrupy."""

    def __init__(self, syrupy: Syrupy, source: str) -> None:
        self.syrupy = syrupy
        self.source = source
        self.target = source
        self._text: str | None = None
        self._read = False

    @property
    def own_exists(self) -> bool:
        return self.read() is not None

    def read(self) -> str | None:
        if not self._read:
            self._text = self.syrupy.stored_text()
            self._read = True
        return self._text

    def write(self, data: Any, text: str, was: str | None) -> Written:
        result = self.syrupy.run(data, update=True, forced=False)
        if result.exception is not None:
            raise result.exception
        if result.created:
            return Written(Status.CREATED, self.source, f"created {self.source}")
        return Written(Status.UPDATED, self.source, f"updated {self.source} (was: {was})")

    def count(self, data: Any, ok: bool) -> None:
        self.syrupy.run(data, update=False, forced=ok)

    def annotate(self, lines: list[str]) -> list[str]:
        return lines

    def fields(self) -> dict[str, Any]:
        return {}

    def write_fields(self) -> dict[str, Any]:
        return {}


@dataclass(frozen=True)
class Baseline:
    """Per-env mode: what one assertion compares with and where it may write."""

    env_class: str
    """The environment class of the trace being asserted."""
    own: Path
    """This class's own baseline: the only file per-env mode writes."""
    path: Path
    """The file compared with: `own`, the nearest other class's baseline, or the shared snapshot."""
    used: str | None
    """The class of `path`; None: the shared snapshot."""
    text: str | None
    """The text of `path`; None when it does not exist (then `path` is the missing shared snapshot)."""
    source: str
    """`path` relative to the rootdir, for messages."""
    own_source: str
    """`own` relative to the rootdir, for messages."""

    @property
    def own_exists(self) -> bool:
        return self.used == self.env_class

    def describe(self) -> str:
        """Which baseline was used, for messages: the class, or the fallback and why."""
        if self.own_exists:
            return f"the {self.env_class} baseline {self.source}"
        fallback = f"the {self.used} baseline" if self.used else "the shared snapshot"
        return f"{fallback} {self.source} (fallback: no {self.env_class} baseline yet)"


class BaselineStore:
    """The baseline of the trace's environment class (or its fallback), written with `core.files.write_snapshot`."""

    def __init__(self, syrupy: Syrupy, base: Baseline) -> None:
        self.syrupy = syrupy
        self.base = base
        self.source = base.source
        self.target = base.own_source

    @property
    def own_exists(self) -> bool:
        return self.base.own_exists

    def read(self) -> str | None:
        return self.base.text

    def write(self, data: Any, text: str, was: str | None) -> Written:
        base = self.base
        write_snapshot(base.own, text)
        self.syrupy.run(data, update=False, forced=True, read_from=base.own)
        status = Status.UPDATED if base.own_exists else Status.CREATED
        head = f"{status} {base.own_source} (the {base.env_class} baseline"
        detail = f"{head})" if was is None else f"{head}; was: {was} against {base.describe()})"
        return Written(status, base.own_source, detail)

    def count(self, data: Any, ok: bool) -> None:
        self.syrupy.run(data, update=False, forced=ok, read_from=self.base.path)

    def annotate(self, lines: list[str]) -> list[str]:
        """`lines` with a second line naming the baseline (pytest truncates long explanations from the end)."""
        return [*lines[:1], f"compared with {self.base.describe()}", *lines[1:]]

    def fields(self) -> dict[str, Any]:
        base = self.base
        used = base.used or ("shared fallback" if base.text is not None else None)
        return {"per_env": True, "environment_class": base.env_class, "baseline": used, "baseline_file": base.source}

    def write_fields(self) -> dict[str, Any]:
        base = self.base
        return {
            "per_env": True,
            "environment_class": base.env_class,
            "baseline": base.env_class,
            "baseline_file": base.own_source,
        }


def write_by_rank_zero(store: Store, data: Any, text: str, was: str | None) -> Written:
    """`store.write`, by rank 0 alone under torchrun (`distributed.from_rank_zero`): the other ranks, which agreed on
    the text, report what rank 0 wrote and let syrupy count the assertion as passed."""
    written = distributed.from_rank_zero(lambda: store.write(data, text, was))
    if not distributed.follower() and written is not None:
        return written
    if written is None:  # no process group to hear from rank 0: it writes what this rank would have written
        own = store.base.own_source if isinstance(store, BaselineStore) else store.source
        status = Status.UPDATED if store.own_exists else Status.CREATED
        return Written(status, own, f"{status} {own} (written by rank 0)")
    store.count(data, True)  # rank 0 has written it: syrupy reads it and counts a pass
    return dataclasses.replace(written, detail=f"{written.detail} (written by rank 0)")


def file_in_the_way(path: Path) -> Path | None:
    """The file standing where one of `path`'s folders should be (None when every existing ancestor is a folder)."""
    for parent in path.parents:
        if parent.exists():
            return None if parent.is_dir() else parent
    return None
