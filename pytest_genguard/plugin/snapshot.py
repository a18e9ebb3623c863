"""The syrupy side: `GenguardSnapshotExtension` (storage, tolerant matching, diff text) and the test's tolerances
(ini options, then ``@pytest.mark.genguard(...)``). The rule is `pytest_genguard.core.documents.compare_documents`;
the fixture object, which decides what is written, is `pytest_genguard.plugin.snapshot_fixture.GenguardSnapshot`.

Storage: one file per snapshot, ``__snapshots__/<test module>/<test name>.genguard``, holding the trace's own JSON
(`GenerationTrace.to_json()`, or a recorder history's `history_to_json()`). The suffix is deliberately not ``.json``:
syrupy's `JSONSnapshotExtension` claims every ``*.json`` file one level under ``__snapshots__/<test module>/``, so a
``test_x.trace.json`` would be read by it as a snapshot named ``test_x.trace`` and deleted as unused on
``--snapshot-update``. A single suffix also keeps the file stem equal to the test name, which is what syrupy uses to
keep the snapshots of skipped tests (see tests/plugin/test_snapshot_json_extension_coexistence.py).

Tolerances are per test (ini options, then ``@pytest.mark.genguard(...)``), but syrupy builds extensions with no
arguments (and pytest-xdist re-imports them by name), so the class stays plain: the fixture object sets the test's
tolerances on its own extension instance, compares before syrupy decides anything, and lets syrupy write only what
may be written (``--snapshot-update``; stale snapshots with ``--genguard-update-stale``). A snapshot that matches
within tolerance is never rewritten.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode
from syrupy.terminal import disable_color

from pytest_genguard.core.documents import Outcome, compare_documents, dump_document
from pytest_genguard.core.files import atomic_write_text
from pytest_genguard.core.tolerances import TOLERANCE_FIELDS, Overrides
from pytest_genguard.core.verdict import Rerecord
from pytest_genguard.plugin import keep
from pytest_genguard.plugin.settings import settings

if TYPE_CHECKING:
    from syrupy.data import SnapshotCollection, SnapshotCollections
    from syrupy.location import PyTestLocation

__all__ = [
    "FILE_EXTENSION",
    "GenguardSnapshotExtension",
    "allows_nonfinite",
    "marker_tolerances",
    "tolerance_overrides",
]

FILE_EXTENSION = "genguard"
ALLOW_NONFINITE = "allow_nonfinite"
ALLOW_DTYPE_CHANGE = "allow_dtype_change"
MARKER_KEYS = (*TOLERANCE_FIELDS, ALLOW_NONFINITE, ALLOW_DTYPE_CHANGE)
_MAX_DIFF_LINES = 40


class GenguardSnapshotExtension(SingleFileSnapshotExtension):
    """One ``.genguard`` JSON file per snapshot, matched with `compare()` (tolerant, near-tie aware, stale-aware).

    Usable on its own (``snapshot(extension_class=GenguardSnapshotExtension)``, dtype-default tolerances); the
    `genguard_snapshot` fixture sets `overrides` (the test's tolerances) on its instance.
    """

    _write_mode = WriteMode.TEXT
    file_extension = FILE_EXTENSION

    def __init__(self) -> None:
        self.overrides = Overrides()
        self.history_overrides: Overrides | None = None  # the marker's alone (the fixture sets them)
        self.forced: bool | None = None  # set by GenguardSnapshot for an outcome decided elsewhere (verify())
        self.rerecord = Rerecord()  # what the fix commands re-record (the fixture names its test, per-env or not)
        self.read_from: Path | None = None  # per-env baselines: the file genguard compared with (see snapshot_fixture)
        self._cache: dict[tuple[str, str], Outcome] = {}

    def serialize(self, data: Any, *, exclude: Any = None, include: Any = None, matcher: Any = None) -> str:
        return dump_document(data)

    def discover_snapshots(
        self, *, test_location: PyTestLocation, ignore_extensions: list[str] | None = None
    ) -> SnapshotCollections:
        """syrupy's discovery, minus the files of tests that did not reach their assertion in this run: syrupy must
        not count those as unused, or ``--snapshot-update`` deletes them (see `pytest_genguard.plugin.keep`)."""
        ignore = keep.own_ignore(test_location, ignore_extensions)
        found = super().discover_snapshots(test_location=test_location, ignore_extensions=ignore)
        return keep.withhold(type(self), test_location, found)

    def read_snapshot_data_from_location(
        self, *, snapshot_location: str, snapshot_name: str, session_id: str
    ) -> str | None:
        """The file's text (bytes that are not UTF-8 are kept as lone surrogates, so a corrupt file reads); None when
        it is missing. Other OS errors (permissions, a folder in its place) propagate: the fixture reports them."""
        try:
            return Path(self.read_from or snapshot_location).read_bytes().decode("utf-8", "surrogateescape")
        except (FileNotFoundError, NotADirectoryError):  # (a file where one of its folders should be)
            return None

    @classmethod
    def write_snapshot_collection(
        cls, *, snapshot_collection: SnapshotCollection, name_order: dict[str, int] | None = None
    ) -> None:
        """Atomic write: a temporary file in the same folder, then os.replace (readers never see half a file)."""
        path = Path(snapshot_collection.location)
        data = next(iter(snapshot_collection)).data
        if not isinstance(data, str):
            raise TypeError(f"genguard snapshots are text; got {type(data).__name__} for {path}")
        atomic_write_text(path, data, errors="surrogateescape")

    def outcome(self, received: str, stored: str, *, source: str = "snapshot") -> Outcome:
        """`compare_documents` with this instance's tolerances, cached (syrupy may ask again for the diff)."""
        key = (received, stored)
        if key not in self._cache:
            self._cache[key] = compare_documents(
                received,
                stored,
                overrides=self.overrides,
                history_overrides=self.history_overrides,
                source=source,
                rerecord=self.rerecord,
            )
        return self._cache[key]

    def matches(self, *, serialized_data: Any, snapshot_data: Any) -> bool:
        if self.forced is not None:
            return self.forced
        return self.outcome(str(serialized_data), str(snapshot_data)).ok

    def diff_lines(self, serialized_data: Any, snapshot_data: Any) -> Iterator[str]:
        """The explanation first (pytest truncates long explanations), then a capped JSON diff."""
        if snapshot_data:
            yield from self.outcome(str(serialized_data), str(snapshot_data)).detail.splitlines()
            yield ""
        yield from self.json_diff(str(serialized_data), str(snapshot_data or ""))

    def json_diff(self, received: str, stored: str) -> Iterator[str]:
        with disable_color():
            lines = list(super().diff_lines(received, stored))
        yield "JSON diff (- snapshot, + received):"
        yield from itertools.islice(lines, _MAX_DIFF_LINES)
        if len(lines) > _MAX_DIFF_LINES:
            yield f"... {len(lines) - _MAX_DIFF_LINES} more diff lines"


# ---------------------------------------------------------------------------------------------------- tolerances


def _marker_kwargs(node: pytest.Item) -> dict[str, Any]:
    """The arguments of ``@pytest.mark.genguard(...)`` markers (the closest marker wins per key), validated."""
    found: dict[str, Any] = {}
    accepted = ", ".join(f"{key}=" for key in MARKER_KEYS)
    for mark in reversed(list(node.iter_markers("genguard"))):
        where = f"@pytest.mark.genguard on {node.nodeid}"
        if mark.args:
            pytest.fail(f"{where}: takes keyword arguments only ({accepted}); got {mark.args!r}", False)
        for key, value in mark.kwargs.items():
            if key not in MARKER_KEYS:
                pytest.fail(f"{where}: unknown argument {key!r}; accepted: {', '.join(MARKER_KEYS)}", False)
            if key in (ALLOW_NONFINITE, ALLOW_DTYPE_CHANGE):
                if not isinstance(value, bool):
                    pytest.fail(f"{where}: {key}={value!r} is not True or False", False)
                found[key] = value
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                pytest.fail(f"{where}: {key}={value!r} is not a number >= 0 (write e.g. {key}=1e-4)", False)
            if not math.isfinite(value):
                pytest.fail(
                    f"{where}: {key}={value!r} is infinite: it would accept any drift (write e.g. {key}=1e-4)", False
                )
            found[key] = float(value)
    return found


def marker_tolerances(node: pytest.Item) -> Overrides:
    """The tolerances of ``@pytest.mark.genguard(...)`` markers (the closest marker wins per key), validated."""
    return Overrides.of(_marker_kwargs(node))


def allows_nonfinite(node: pytest.Item) -> bool:
    """Whether the test opted in to NaN/inf values with ``@pytest.mark.genguard(allow_nonfinite=True)``."""
    return bool(_marker_kwargs(node).get(ALLOW_NONFINITE, False))


def tolerance_overrides(request: pytest.FixtureRequest) -> Overrides:
    """ini tolerances, then the test's genguard marker on top (marker wins); the rest come from the dtype."""
    return marker_tolerances(request.node).over(settings(request.config).tolerance_overrides())
