"""The one module that reaches into syrupy past its extension API (syrupy 6.0 to 7.0.2, the releases CI runs).

syrupy offers no public way to run an assertion that may write only when told to, reading another file, nor to read
a stored snapshot or the next assertion's name without asserting. What genguard needs of `SnapshotAssertion` beyond
its public surface is named in `SYRUPY_INTERNALS`, used here alone, and checked against the installed syrupy by
``tests/plugin/test_syrupy_adapter.py``, so a syrupy release that renames one fails that test by name rather than
snapshots at random. Everything genguard tells its extension about an assertion travels in one `Plan`, handed over
in `run` (and by the fixture at the start of a test).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from syrupy.exceptions import SnapshotDoesNotExist

from pytest_genguard.plugin.snapshot import GenguardSnapshotExtension, Plan

if TYPE_CHECKING:
    from syrupy.assertion import AssertionResult, SnapshotAssertion

__all__ = ["SYRUPY_INTERNALS", "Plan", "SyrupyAssertion"]

SYRUPY_INTERNALS = (
    "update_snapshots",
    "update_new_snapshots_only",
    "executions",
    "num_executions",
    "test_location",
    "index",
    "session",
)
"""The `SnapshotAssertion` attributes genguard reads or sets (and `session.recall_snapshot`)."""


class SyrupyAssertion:
    """A test's syrupy assertion with the genguard extension, as genguard uses it."""

    def __init__(self, snapshot: SnapshotAssertion, plan: Plan) -> None:
        self.assertion = snapshot.with_defaults(extension_class=GenguardSnapshotExtension)
        self.plan = plan
        self.extension.plan = plan

    @property
    def extension(self) -> GenguardSnapshotExtension:
        ext = self.assertion.extension
        if not isinstance(ext, GenguardSnapshotExtension):  # with_defaults() made it: never another class
            raise TypeError(f"genguard_snapshot: unexpected syrupy extension {type(ext).__name__}")
        return ext

    @property
    def index(self) -> int | str:
        """The next assertion's index in its test (a number, or the name given with ``genguard_snapshot(name=)``)."""
        index: int | str = self.assertion.index
        return index

    @property
    def new_only(self) -> bool:
        """Whether syrupy writes only missing snapshots in this run (``--snapshot-update`` of new ones only)."""
        return bool(self.assertion.update_new_snapshots_only)

    @property
    def name(self) -> str:
        """The snapshot name the next assertion uses (``test_x``, ``test_x.1``, ``test_x[name]``)."""
        a = self.assertion
        return str(self.extension.get_snapshot_name(test_location=a.test_location, index=a.index))

    @property
    def location(self) -> Path:
        """The shared snapshot file of the next assertion."""
        a = self.assertion
        return Path(self.extension.get_location(test_location=a.test_location, index=a.index))

    def stored_text(self) -> str | None:
        """The stored text of the next assertion's shared snapshot (None when it does not exist; OSError when it
        cannot be read)."""
        a = self.assertion
        try:
            data = a.session.recall_snapshot(self.extension, a.test_location, a.index)
        except SnapshotDoesNotExist:
            return None
        return None if data is None else str(data)

    def run(self, data: Any, *, update: bool, forced: bool | None, read_from: Path | None) -> AssertionResult:
        """Run syrupy's assertion on `data` with the plan's `forced`/`read_from` (see `Plan`), writing only when
        `update`; syrupy's own settings and the plan are restored afterwards. The assertion's result."""
        a, ext = self.assertion, self.extension
        saved = (a.update_snapshots, a.update_new_snapshots_only)
        a.update_snapshots = update
        if forced is not None:
            a.update_new_snapshots_only = False
        ext.plan = dataclasses.replace(self.plan, forced=forced, read_from=read_from)
        try:
            a.__eq__(data)
        finally:
            a.update_snapshots, a.update_new_snapshots_only = saved
            ext.plan = self.plan
        result: AssertionResult = a.executions[a.num_executions - 1]
        return result
