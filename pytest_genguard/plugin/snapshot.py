"""The syrupy side: `GenguardSnapshotExtension` (storage, tolerant matching, diff text), the comparison of snapshot
texts, and the test's tolerances. The fixture object itself is
`pytest_genguard.plugin.snapshot_fixture.GenguardSnapshot`.

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

import dataclasses
import itertools
import math
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode

from pytest_genguard.core.compare import TRAINING, TRAINING_LOSS, Comparison, Tolerances, Verdict, compare
from pytest_genguard.core.files import atomic_write_text
from pytest_genguard.core.history import Checkpoint, history_from_json, history_to_json
from pytest_genguard.core.trace import GenerationTrace, TraceFormatError
from pytest_genguard.plugin import session

if TYPE_CHECKING:
    from syrupy.assertion import SnapshotAssertion
    from syrupy.data import SnapshotCollection, SnapshotCollections
    from syrupy.location import PyTestLocation

    from pytest_genguard.plugin.snapshot_fixture import GenguardSnapshot

__all__ = [
    "FILE_EXTENSION",
    "GenguardSnapshotExtension",
    "Outcome",
    "allows_nonfinite",
    "assertrepr",
    "compare_texts",
    "fix_command",
    "genguard_snapshot_for",
    "is_history",
    "marker_tolerances",
    "parse_snapshot",
    "serialize_value",
    "tolerance_kwargs",
    "tolerance_overrides",
]

FILE_EXTENSION = "genguard"
TOLERANCE_KEYS = ("atol", "rtol", "tie_tol")
ALLOW_NONFINITE = "allow_nonfinite"
MARKER_KEYS = (*TOLERANCE_KEYS, ALLOW_NONFINITE)
_OK = frozenset({Verdict.IDENTICAL.value, Verdict.WITHIN_TOLERANCE.value, Verdict.TOLERATED.value})
_MAX_DIFF_LINES = 40
_ACCEPTS = (
    "genguard_snapshot compares a GenerationTrace (from pytest_genguard.record()) or a GenerationRecorder history "
    "(recorder.history); use syrupy's plain `snapshot` fixture for other data"
)


# ---------------------------------------------------------------------------------------------------- values


def is_history(value: Any) -> bool:
    """A recorder history: a `GenerationRecorder` or a list of `Checkpoint`s (which exist without the recorder)."""
    recorder = sys.modules.get("pytest_genguard.hf.recorder")  # not imported here: it needs transformers
    if recorder is not None and isinstance(value, recorder.GenerationRecorder):
        return True
    return isinstance(value, list) and all(isinstance(c, Checkpoint) for c in value)


def serialize_value(value: Any) -> str:
    """The snapshot text of a trace or a recorder history; TypeError (saying what is accepted) for anything else."""
    if isinstance(value, GenerationTrace):
        return value.to_json()
    if is_history(value):
        history = value.history if hasattr(value, "history") else value
        return history_to_json(history)
    raise TypeError(f"{_ACCEPTS}; got {type(value).__name__}")


def parse_snapshot(text: str, source: str) -> Any:
    """A `GenerationTrace` or a recorder history (list of checkpoints) from snapshot text; TraceFormatError if bad."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:  # bytes that are not UTF-8 were read as lone surrogates
        raise TraceFormatError(
            f"{source}: not UTF-8 text (invalid byte at offset {exc.start}); the file is corrupt: restore it from "
            "version control or re-record it (pytest --snapshot-update)."
        ) from None
    head = text[:200]
    if '"genguard_history"' in head:
        return history_from_json(text, source=source)
    return GenerationTrace.from_json(text, source=source)


# ---------------------------------------------------------------------------------------------------- outcomes


@dataclasses.dataclass(frozen=True)
class Outcome:
    """One comparison of received data with a stored snapshot: the verdict and the text that explains it.

    `verdict` is a `Verdict` value, or "invalid" when the stored file cannot be read.
    """

    verdict: str
    detail: str
    comparison: Comparison | None = None

    @property
    def ok(self) -> bool:
        return self.verdict in _OK

    @property
    def summary(self) -> str:
        return self.detail.splitlines()[0] if self.detail else self.verdict


def fix_command(verdict: str, nodeid: str | None, options: str = "") -> str | None:
    """The command that re-records one snapshot for a failing verdict (None for a passing one); `options` go
    before the flag (``--genguard-baselines per-env``: without it the command would rewrite the shared snapshot)."""
    target = f" {shlex.quote(nodeid)}" if nodeid else ""
    prefix = f"pytest {options} " if options else "pytest "
    if verdict == Verdict.STALE.value:
        return f"{prefix}--genguard-update-stale{target}"
    if verdict in (Verdict.REGRESSION.value, "invalid"):
        return f"{prefix}--snapshot-update{target}"
    return None


def compare_texts(
    received: str,
    stored: str,
    overrides: dict[str, float],
    *,
    source: str = "snapshot",
    nodeid: str | None = None,
    options: str = "",
    history_overrides: dict[str, float] | None = None,
) -> Outcome:
    """Compare received snapshot text with stored snapshot text under the tolerant rule. Recorder histories use the
    training tolerance with `history_overrides` on top (None: `overrides`): the ini tolerances are about decoding."""
    from pytest_genguard.core.explain import render

    try:
        expected = parse_snapshot(stored, source)
    except TraceFormatError as exc:
        rerecord = fix_command("invalid", nodeid, options)
        return Outcome(
            "invalid",
            f"{exc}\nThis test fails until the file is fixed (it was left unchanged); to re-record only this "
            f"snapshot: {rerecord}",
        )
    actual = parse_snapshot(received, "received data")
    if isinstance(expected, GenerationTrace) and isinstance(actual, GenerationTrace):
        cmp = compare(expected, actual, **tolerance_kwargs(overrides))
        return Outcome(cmp.verdict.value, render(cmp, fix=fix_command(cmp.verdict.value, nodeid, options)), cmp)
    if isinstance(expected, list) and isinstance(actual, list):
        training = overrides if history_overrides is None else history_overrides
        return _compare_histories(expected, actual, training, nodeid, options)
    kinds = {True: "a GenerationTrace", False: "a recorder history"}
    detail = (
        f"stale: {source} holds {kinds[isinstance(expected, GenerationTrace)]} but the test now compares "
        f"{kinds[isinstance(actual, GenerationTrace)]}; if intended, re-record with: "
        f"{fix_command('stale', nodeid, options)}"
    )
    return Outcome(Verdict.STALE.value, detail)


def training_tolerances(overrides: dict[str, float]) -> Tolerances:
    """The tolerances a recorder history is compared with: `TRAINING`, with the test's overrides on top."""
    return TRAINING.replace(**tolerance_kwargs(overrides))


def _describe_training(tolerances: Tolerances) -> str:
    return f"training tolerance: logprobs {tolerances}; loss atol {TRAINING_LOSS.atol:g}, rtol {TRAINING_LOSS.rtol:g}"


def _compare_histories(
    expected: list[Any], actual: list[Any], overrides: dict[str, float], nodeid: str | None, options: str = ""
) -> Outcome:
    """Checkpoint by checkpoint under the training tolerance (training on another CPU amplifies rounding; see
    `compare.TRAINING`): the schedule (step, event) must match (else stale), each trace via compare()."""
    from pytest_genguard.core.explain import number, render

    schedule_e = [(c.step, c.event) for c in expected]
    schedule_a = [(c.step, c.event) for c in actual]
    if schedule_e != schedule_a:
        detail = (
            f"stale: the recorder's checkpoints changed: {schedule_e} -> {schedule_a} (step, event); if intended, "
            f"re-record with: {fix_command('stale', nodeid, options)}"
        )
        return Outcome(Verdict.STALE.value, detail)
    tolerances = training_tolerances(overrides)
    severity = [Verdict.IDENTICAL, Verdict.WITHIN_TOLERANCE, Verdict.TOLERATED, Verdict.REGRESSION, Verdict.STALE]
    worst: tuple[int, Comparison] | None = None
    loss_notes = []
    for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
        cmp = compare(e.trace, a.trace, tolerances=tolerances)
        if worst is None or severity.index(cmp.verdict) > severity.index(worst[1].verdict):
            worst = (i, cmp)
        if e.loss is not None and a.loss is not None and not TRAINING_LOSS.close(e.loss, a.loss):
            loss_notes.append(f"checkpoint {i} (step {e.step}): loss {number(e.loss, 6)} -> {number(a.loss, 6)}")
    if worst is None:
        return Outcome(Verdict.IDENTICAL.value, "identical (no checkpoints)")
    index, cmp = worst
    verdict = cmp.verdict
    if loss_notes and severity.index(verdict) < severity.index(Verdict.REGRESSION):
        verdict = Verdict.REGRESSION
    where = f"checkpoint {index} (step {expected[index].step}, {expected[index].event})"
    head = f"{verdict.value}: {len(expected)} checkpoints, worst at {where} ({_describe_training(tolerances)})"
    lines = [head, *(["training loss beyond tolerance: " + "; ".join(loss_notes)] if loss_notes else [])]
    lines += ["", f"{where}:", render(cmp, fix=fix_command(verdict.value, nodeid, options))]
    return Outcome(verdict.value, "\n".join(lines), cmp)


# ---------------------------------------------------------------------------------------------------- the extension


class GenguardSnapshotExtension(SingleFileSnapshotExtension):
    """One ``.genguard`` JSON file per snapshot, matched with `compare()` (tolerant, near-tie aware, stale-aware).

    Usable on its own (``snapshot(extension_class=GenguardSnapshotExtension)``, dtype-default tolerances); the
    `genguard_snapshot` fixture sets `overrides` (the test's tolerances) on its instance.
    """

    _write_mode = WriteMode.TEXT
    file_extension = FILE_EXTENSION

    def __init__(self) -> None:
        self.overrides: dict[str, float] = {}
        self.history_overrides: dict[str, float] | None = None  # the marker's alone (the fixture sets them)
        self.forced: bool | None = None  # set by GenguardSnapshot for an outcome decided elsewhere (verify())
        self.nodeid: str | None = None
        self.fix_options = ""  # options the fix commands need (per-env baselines: "--genguard-baselines per-env")
        self.read_from: Path | None = None  # per-env baselines: the file genguard compared with (see snapshot_fixture)
        self._cache: dict[tuple[str, str], Outcome] = {}

    def serialize(self, data: Any, *, exclude: Any = None, include: Any = None, matcher: Any = None) -> str:
        return serialize_value(data)

    def discover_snapshots(
        self, *, test_location: PyTestLocation, ignore_extensions: list[str] | None = None
    ) -> SnapshotCollections:
        """syrupy's discovery, minus the files of tests that did not reach their assertion in this run: syrupy must
        not count those as unused, or ``--snapshot-update`` deletes them (see `pytest_genguard.plugin.keep`)."""
        from pytest_genguard.plugin import keep

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
        """`compare_texts` with this instance's tolerances, cached (syrupy may ask again for the diff)."""
        key = (received, stored)
        if key not in self._cache:
            self._cache[key] = compare_texts(
                received,
                stored,
                self.overrides,
                source=source,
                nodeid=self.nodeid,
                options=self.fix_options,
                history_overrides=self.history_overrides,
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
        from syrupy.terminal import disable_color

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
            if key == ALLOW_NONFINITE:
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


def marker_tolerances(node: pytest.Item) -> dict[str, float]:
    """The tolerances of ``@pytest.mark.genguard(...)`` markers (the closest marker wins per key), validated."""
    return {key: value for key, value in _marker_kwargs(node).items() if key in TOLERANCE_KEYS}


def allows_nonfinite(node: pytest.Item) -> bool:
    """Whether the test opted in to NaN/inf values with ``@pytest.mark.genguard(allow_nonfinite=True)``."""
    return bool(_marker_kwargs(node).get(ALLOW_NONFINITE, False))


def tolerance_overrides(request: pytest.FixtureRequest) -> dict[str, float]:
    """ini tolerances, then the test's genguard marker on top (marker wins); the rest come from the dtype."""
    overrides = dict(session.settings(request.config).tolerance_overrides())
    overrides.update(marker_tolerances(request.node))
    return overrides


def tolerance_kwargs(overrides: dict[str, float]) -> dict[str, Any]:
    """`compare()` keyword arguments for tolerance overrides (absent keys: the dtype default)."""
    return {key: overrides.get(key) for key in TOLERANCE_KEYS}


def genguard_snapshot_for(snapshot: SnapshotAssertion, request: pytest.FixtureRequest) -> GenguardSnapshot:
    """The `genguard_snapshot` fixture value for this test."""
    from pytest_genguard.plugin.snapshot_fixture import GenguardSnapshot

    fixture = GenguardSnapshot(snapshot, request, tolerance_overrides(request))
    fixture.extension.history_overrides = marker_tolerances(request.node)  # ini tolerances are about decoding
    fixture.allow_nonfinite = allows_nonfinite(request.node)
    return fixture


def assertrepr(op: str, left: object, right: object) -> list[str] | None:
    """The failure explanation for ``x == genguard_snapshot`` (called by plugin.pytest_assertrepr_compare)."""
    from pytest_genguard.plugin.snapshot_fixture import GenguardSnapshot

    for snap, other in ((right, left), (left, right)):
        if op == "==" and isinstance(snap, GenguardSnapshot) and snap.explanation:
            head = f"{type(other).__name__} == genguard_snapshot {snap.last_name!r} ({snap.last_source})"
            return [head, *snap.explanation]
    return None
