"""The syrupy side: `GenguardSnapshotExtension` (storage, tolerant matching, diff text) and the test's tolerances
(ini options, then ``@pytest.mark.genguard(...)``). The rule is `pytest_genguard.core.documents.compare_documents`;
the fixture object, which decides what is written, is `pytest_genguard.plugin.snapshot_fixture.GenguardSnapshot`.

Storage: one file per snapshot, ``__snapshots__/<test module>/<test name>.genguard``, holding the trace's own JSON
(`GenerationTrace.to_json()`, or a recorder history's `history_to_json()`). The suffix is deliberately not ``.json``:
syrupy's `JSONSnapshotExtension` claims every ``*.json`` file one level under ``__snapshots__/<test module>/``, so a
``test_x.trace.json`` would be read by it as a snapshot named ``test_x.trace`` and deleted as unused on
``--snapshot-update``. A single suffix also keeps the file stem equal to the test name, which is what syrupy uses to
keep the snapshots of skipped tests (see tests/plugin/test_snapshot_json_extension_coexistence.py).

File names: syrupy drops ``\\ / ? * : | " < >`` and control characters from a test id, so ``test_x[a/b]`` and
``test_x[a:b]`` would share ``test_x[ab].genguard``. A name that cleaning changed, or one longer than 200 characters
(cut so that the temporary files written beside it fit in a file name's 255), gets ``~`` and 8 hex digits of the
sha256 of the test's own name: ``test_x[ab]~6f1e0c2a.genguard``. Names that need no cleaning are syrupy's, as before.
Ids that differ only in case (one file on macOS and Windows) fail the second test's assertion, naming both
(`shared_file_owner`).

Tolerances are per test (ini options, then ``@pytest.mark.genguard(...)``), but syrupy builds extensions with no
arguments (and pytest-xdist re-imports them by name), so the class stays plain: the fixture object sets the test's
tolerances on its own extension instance, compares before syrupy decides anything, and lets syrupy write only what
may be written (``--snapshot-update``; stale snapshots with ``--genguard-update-stale``). A snapshot that matches
within tolerance is never rewritten.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from syrupy.extensions.base import AbstractSyrupyExtension
from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode
from syrupy.terminal import disable_color

from pytest_genguard.core.documents import Outcome, compare_documents, dump_document
from pytest_genguard.core.files import write_snapshot
from pytest_genguard.core.tolerances import TOLERANCE_FIELDS, Overrides
from pytest_genguard.core.verdict import Rerecord
from pytest_genguard.plugin import keep
from pytest_genguard.plugin.settings import settings

if TYPE_CHECKING:
    from syrupy.data import SnapshotCollection, SnapshotCollections
    from syrupy.location import PyTestLocation
    from syrupy.types import SnapshotIndex

__all__ = [
    "FIDELITY",
    "FILE_EXTENSION",
    "GenguardSnapshotExtension",
    "Plan",
    "allows_nonfinite",
    "marker_tolerances",
    "shared_file_owner",
    "tolerance_overrides",
]

FILE_EXTENSION = "genguard"
ALLOW_NONFINITE = "allow_nonfinite"
ALLOW_DTYPE_CHANGE = "allow_dtype_change"
FIDELITY = "fidelity"  # a budget, validated by plugin/fidelity_marker.py
MARKER_KEYS = (*TOLERANCE_FIELDS, ALLOW_NONFINITE, ALLOW_DTYPE_CHANGE, FIDELITY)
_MAX_DIFF_LINES = 40
# A name's 255 characters hold the stem, ".genguard" and the 38 characters write_snapshot's temporary file adds.
_MAX_STEM = 200
_UNSAFE = frozenset('\\/?*:|"<>')  # what syrupy drops from a file name (with control characters)
_TAG = 9  # "~" and 8 hex digits


def _safe(text: str) -> str:
    return "".join(ch for ch in text if ch not in _UNSAFE and not unicodedata.category(ch).startswith("C"))


@dataclass(frozen=True)
class Plan:
    """What the genguard fixture tells its extension about an assertion, in one object (handed over by
    `plugin/syrupy_adapter.py`): the test's tolerances, the re-record command, and for one run an outcome decided
    elsewhere (`forced`: verify(), per-env baselines) or the file genguard compared with (`read_from`)."""

    overrides: Overrides = field(default_factory=Overrides)
    history_overrides: Overrides | None = None
    """The marker's tolerances alone, for histories (ini tolerances are about decoding)."""
    rerecord: Rerecord = field(default_factory=Rerecord)
    forced: bool | None = None
    read_from: Path | None = None


class GenguardSnapshotExtension(SingleFileSnapshotExtension):
    """One ``.genguard`` JSON file per snapshot, matched with `compare()` (tolerant, near-tie aware, stale-aware).

    Usable on its own (``snapshot(extension_class=GenguardSnapshotExtension)``, dtype-default tolerances); the
    `genguard_snapshot` fixture hands its instance a `Plan` (the test's tolerances, ...).
    """

    _write_mode = WriteMode.TEXT
    file_extension = FILE_EXTENSION

    def __init__(self) -> None:
        self.plan = Plan()  # the fixture's (see Plan); the defaults are the dtype-default tolerances
        self._cache: dict[tuple[str, str], Outcome] = {}

    def serialize(self, data: Any, *, exclude: Any = None, include: Any = None, matcher: Any = None) -> str:
        return dump_document(data)

    @classmethod
    def get_snapshot_name(cls, *, test_location: PyTestLocation, index: SnapshotIndex = 0) -> str:
        """syrupy's file-safe name, plus ``~<hash of the test's name>`` where making it file-safe changed it (see the
        module docstring): two test ids never share a file, and ids that need no cleaning keep their names."""
        raw = AbstractSyrupyExtension.get_snapshot_name(test_location=test_location, index=0)
        base = super().get_snapshot_name(test_location=test_location, index=0)
        if base != raw or len(base) > _MAX_STEM:
            base = f"{base[: _MAX_STEM - _TAG]}~{hashlib.sha256(raw.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"
        suffix = AbstractSyrupyExtension.get_snapshot_name(test_location=test_location, index=index)[len(raw) :]
        return (base + _safe(suffix))[:_MAX_STEM]

    @classmethod
    def matches_test_location(cls, *, test_location: PyTestLocation, snapshot_location: str) -> bool:
        """syrupy's rule, and a file named with a hash (above) belongs to the test whose name it was made from (so
        ``--snapshot-update`` neither warns nor deletes it as unused)."""
        if super().matches_test_location(test_location=test_location, snapshot_location=snapshot_location):
            return True
        path = Path(snapshot_location)
        suffix = f".{FILE_EXTENSION}"
        if path.parent.name != test_location.basename or not path.name.endswith(suffix):
            return False
        if not test_location.matches_snapshot_site(snapshot_location):
            return False
        base = cls.get_snapshot_name(test_location=test_location, index=0)
        stem = path.name[: -len(suffix)]
        return stem == base or stem.startswith((f"{base}.", f"{base}["))

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
            return Path(self.plan.read_from or snapshot_location).read_bytes().decode("utf-8", "surrogateescape")
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
        write_snapshot(path, data)

    def outcome(self, received: str, stored: str, *, source: str = "snapshot") -> Outcome:
        """`compare_documents` with this instance's tolerances, cached (syrupy may ask again for the diff)."""
        key = (received, stored)
        if key not in self._cache:
            self._cache[key] = compare_documents(
                received,
                stored,
                overrides=self.plan.overrides,
                history_overrides=self.plan.history_overrides,
                source=source,
                rerecord=self.plan.rerecord,
            )
        return self._cache[key]

    def matches(self, *, serialized_data: Any, snapshot_data: Any) -> bool:
        if self.plan.forced is not None:
            return self.plan.forced
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


def shared_file_owner(item: pytest.Item) -> str | None:
    """The node id of an earlier collected test whose snapshots go to the same file as `item`'s on a file system that
    ignores case (macOS, Windows: ``test_x[A]`` and ``test_x[a]``), or None. Every process (xdist workers too)
    collects the same tests in the same order, so the same test is told, everywhere."""
    owners = item.config.stash.get(_FILE_OWNERS, None)
    if owners is None:
        owners = {}
        for other in item.session.items:
            if "genguard_snapshot" in getattr(other, "fixturenames", ()):
                owners.setdefault(_file_key(other), other.nodeid)
        item.config.stash[_FILE_OWNERS] = owners
    owner = owners.get(_file_key(item))
    return owner if owner is not None and owner != item.nodeid else None


def _file_key(item: pytest.Item) -> tuple[str, str]:
    from syrupy.location import PyTestLocation  # imported by then: genguard_snapshot needs syrupy

    location = PyTestLocation(item)
    folder = GenguardSnapshotExtension.dirname(test_location=location)
    return folder.casefold(), GenguardSnapshotExtension.get_snapshot_name(test_location=location).casefold()


_FILE_OWNERS = pytest.StashKey[dict[tuple[str, str], str]]()


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
            if key == FIDELITY:
                continue
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
