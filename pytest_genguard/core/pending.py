"""Pending traces: the new trace of a snapshot comparison that failed (a regression or a stale snapshot), kept so that
a person can review it and accept it without running the model again (`genguard review`).

Where: ``<rootdir>/.genguard/pending/``, beside a ``.genguard/.gitignore`` that holds ``*`` (as pytest's and mypy's
caches do), so git never shows them; outside pytest's cache, so ``-p no:cacheprovider`` keeps them too. One pair per
snapshot file, named by the file's id (`pending_id`: 8 hex digits of the sha256 of its path relative to the rootdir):

- ``<id>.genguard``: the new trace's text, exactly what ``--snapshot-update`` would have written;
- ``<id>.json``: the record (`Pending`) that vouches for it: the test, the snapshot file accepting writes, the sha256
  of the snapshot text it was compared with (and of the file compared with, when a per-env baseline fell back to
  another), the sha256 of the trace text, the verdict and what accepting it changes.

The trace is written first and the record last (each atomically), under a lock per id: a reader sees the old pair,
the new one, or a record whose trace does not match it (reported, never accepted). A run keeps a pair only in place of
the snapshot it failed against, never over it.

Accepting (`PendingStore.accept`) refuses, saying why, when the record does not name its own file, the trace is not
the one the record vouches for, the snapshot changed since the comparison (another run, a checkout, an edit), or the
text is not a trace or holds NaN/inf without the test's opt-in; else it writes the text with
`core.files.write_snapshot`, the one write of every snapshot, and removes the pair. Standard library only: the
callers hand in a lock (filelock's `FileLock`).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pytest_genguard.core.change import Change
from pytest_genguard.core.documents import parse_document
from pytest_genguard.core.errors import TraceFormatError
from pytest_genguard.core.files import atomic_write_text, file_sha256, text_bytes_sha256, write_snapshot
from pytest_genguard.core.review import changed_lines, nonfinite_message, nonfinite_values

__all__ = [
    "GITIGNORE",
    "PENDING_DIR",
    "Accepted",
    "Broken",
    "LockFactory",
    "Pending",
    "PendingStore",
    "pending_id",
    "select",
]

PENDING_DIR = ".genguard"
"""The folder in the rootdir that holds genguard's untracked state (`pending/`), ignored by its own .gitignore."""
GITIGNORE = "# pytest-genguard's pending traces (genguard review): never committed\n*\n"
_SCHEMA = 1
_SUFFIX = ".genguard"

LockFactory = Callable[[str], AbstractContextManager[Any]]
"""Makes the lock of one pending id from its lock file's path (`filelock.FileLock`)."""


def pending_id(file: str) -> str:
    """The id of the pending trace of snapshot `file` (its path relative to the rootdir, with ``/``)."""
    return hashlib.sha256(file.encode("utf-8", "surrogateescape")).hexdigest()[:8]


@dataclass(frozen=True)
class Pending:
    """A pending trace's record (see the module docstring)."""

    id: str
    test: str
    name: str
    file: str
    """The snapshot file accepting writes, relative to the rootdir."""
    file_sha256: str | None
    """The sha256 of `file` when the comparison was made (None: it did not exist: a per-env baseline's fallback)."""
    compared: str
    """The file the trace was compared with (`file`, or a per-env fallback)."""
    compared_sha256: str
    verdict: str
    summary: str
    trace_sha256: str
    via: str | None = None
    changes: tuple[str, ...] = ()
    """What accepting changes, as the summary of ``--snapshot-update`` lists it (`core.review.accepted_changes`)."""
    change: Mapping[str, Any] | None = None
    """`core.change.Change.to_json()` of the comparison."""
    allow_nonfinite: bool = False
    overrides: Mapping[str, float | bool] = field(default_factory=dict)
    """The test's tolerances, to compare the trace with the snapshot as its run did."""
    per_env: bool = False
    created: str = ""

    def line(self) -> str:
        """One line: the verdict and what changed where."""
        what = Change.from_json(self.change).line() if self.change else self.summary
        return f"{self.verdict}: {what}"

    def to_json(self) -> str:
        doc = {"genguard_pending": _SCHEMA, **asdict(self)}
        doc["changes"], doc["change"], doc["overrides"] = list(self.changes), self.change, dict(self.overrides)
        return json.dumps(doc, indent=1, sort_keys=True) + "\n"  # ASCII: token texts may hold lone surrogates

    @classmethod
    def from_json(cls, text: str) -> Pending:
        """The record from its text; ValueError saying what is wrong."""
        doc = json.loads(text)
        if not isinstance(doc, dict) or doc.get("genguard_pending") != _SCHEMA:
            raise ValueError(f"not a pending-trace record of schema {_SCHEMA}")
        try:
            return cls(
                id=str(doc["id"]),
                test=str(doc["test"]),
                name=str(doc["name"]),
                file=str(doc["file"]),
                file_sha256=None if doc["file_sha256"] is None else str(doc["file_sha256"]),
                compared=str(doc["compared"]),
                compared_sha256=str(doc["compared_sha256"]),
                verdict=str(doc["verdict"]),
                summary=str(doc["summary"]),
                trace_sha256=str(doc["trace_sha256"]),
                via=None if doc.get("via") is None else str(doc["via"]),
                changes=tuple(str(c) for c in doc.get("changes", ())),
                change=doc.get("change") if isinstance(doc.get("change"), dict) else None,
                allow_nonfinite=bool(doc.get("allow_nonfinite", False)),
                overrides=dict(doc.get("overrides") or {}),
                per_env=bool(doc.get("per_env", False)),
                created=str(doc.get("created", "")),
            )
        except KeyError as exc:
            raise ValueError(f"the record has no {exc.args[0]!r}") from None


@dataclass(frozen=True)
class Broken:
    """A record that cannot be read, or whose trace is missing: listed, rejectable, never accepted."""

    id: str
    why: str


@dataclass(frozen=True)
class Accepted:
    """An accepted trace: the file written and the summary's lines of what the new snapshot changed."""

    pending: Pending
    lines: tuple[str, ...]


class PendingStore:
    """The pending traces of the project at `root` (the rootdir); `lock` makes each id's lock (none by default)."""

    def __init__(self, root: Path, lock: LockFactory | None = None) -> None:
        self.root = root
        self.folder = root / PENDING_DIR / "pending"
        self._lock = lock

    def _locked(self, pid: str) -> AbstractContextManager[Any]:
        if self._lock is None:
            return contextlib.nullcontext()
        self.folder.mkdir(parents=True, exist_ok=True)
        return self._lock(str(self.folder / f"{pid}.lock"))

    def _paths(self, pid: str) -> tuple[Path, Path]:
        return self.folder / f"{pid}.json", self.folder / f"{pid}{_SUFFIX}"

    def path(self, relative: str) -> Path:
        """A record's file (relative to the rootdir, or absolute) as a path."""
        return self.root / relative

    # ------------------------------------------------------------------------------------------------ writing

    def keep(self, text: str, stored: str, **fields: Any) -> Pending:
        """Keep `text` (the new trace) as the pending trace of `fields["file"]`, compared with `stored` (the text of
        `fields["compared"]`); replaces an earlier pending trace of the same file. OSError when it cannot be written."""
        file, compared = str(fields["file"]), str(fields["compared"])
        stored_sha = text_bytes_sha256(stored)
        if file == compared:
            own_sha: str | None = stored_sha
        else:
            own = self.path(file)
            own_sha = file_sha256(own) if own.is_file() else None
        record = Pending(
            id=pending_id(file),
            file_sha256=own_sha,
            compared_sha256=stored_sha,
            trace_sha256=text_bytes_sha256(text),
            created=_dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            **fields,
        )
        ignore = self.root / PENDING_DIR / ".gitignore"
        if not ignore.is_file():
            atomic_write_text(ignore, GITIGNORE)
        with self._locked(record.id):
            meta, trace = self._paths(record.id)
            write_snapshot(trace, text)
            atomic_write_text(meta, record.to_json())
        return record

    def clear(self, file: str) -> None:
        """Remove the pending trace of snapshot `file`, if there is one (a passing run, a written snapshot)."""
        if self.folder.is_dir():
            self.remove(pending_id(file))

    def remove(self, pid: str) -> None:
        """Remove pending trace `pid` (record first: a trace without its record is never read)."""
        meta, trace = self._paths(pid)
        if not meta.exists() and not trace.exists():
            return
        with self._locked(pid):
            meta.unlink(missing_ok=True)
            trace.unlink(missing_ok=True)

    # ------------------------------------------------------------------------------------------------ reading

    def entries(self) -> list[Pending | Broken]:
        """Every pending trace, sorted by test and snapshot name; unreadable ones as `Broken`, last."""
        if not self.folder.is_dir():
            return []
        found: list[Pending] = []
        broken: list[Broken] = []
        ids = {p.name.split(".", 1)[0] for p in self.folder.iterdir() if p.suffix in (".json", _SUFFIX)}
        for pid in sorted(ids):
            meta, trace = self._paths(pid)
            try:
                record = Pending.from_json(meta.read_text(encoding="utf-8"))
            except FileNotFoundError:
                broken.append(Broken(pid, f"{trace.name} has no record ({meta.name}): an interrupted write"))
                continue
            except (OSError, ValueError) as exc:
                broken.append(Broken(pid, f"{meta.name} cannot be read: {exc}"))
                continue
            found.append(record)
        found.sort(key=lambda p: (p.test, p.name))
        return [*found, *broken]

    def text(self, pending: Pending) -> str | None:
        """The pending trace's text, None when it is missing or not the text its record vouches for."""
        trace = self._paths(pending.id)[1]
        try:
            text = trace.read_bytes().decode("utf-8", "surrogateescape")
        except OSError:
            return None
        return text if text_bytes_sha256(text) == pending.trace_sha256 else None

    def stored_text(self, pending: Pending) -> str | None:
        """The current text of the file the trace was compared with (None when it is gone)."""
        try:
            return self.path(pending.compared).read_bytes().decode("utf-8", "surrogateescape")
        except OSError:
            return None

    def refusal(self, pending: Pending) -> list[str] | None:
        """Why accepting `pending` would not be safe (None: it is), each reason with what to do."""
        rerun = f"run the test again (pytest {pending.test}) to compare with the snapshot as it is now"
        if pending.id != pending_id(pending.file) or not pending.file.endswith(_SUFFIX):
            return [
                f"record {pending.id}.json names {pending.file}, whose pending id is {pending_id(pending.file)}: the "
                f"record was copied or edited; reject it and {rerun}"
            ]
        text = self.text(pending)
        if text is None:
            return [
                f"the pending trace {pending.id}{_SUFFIX} is missing or is not the one its record vouches for; {rerun}"
            ]
        compared = self.path(pending.compared)
        current = file_sha256(compared) if compared.is_file() else None
        if current != pending.compared_sha256:
            what = "was deleted" if current is None else "changed"
            return [
                f"{pending.compared} {what} since the run that kept this trace compared with it (a checkout, another "
                f"run or an edit): accepting would overwrite a snapshot nobody reviewed this trace against; {rerun}"
            ]
        if pending.file != pending.compared:
            own = self.path(pending.file)
            state = file_sha256(own) if own.is_file() else None
            if state != pending.file_sha256:
                return [f"{pending.file} changed since the run that kept this trace; {rerun}"]
        try:
            document = parse_document(text, f"pending trace {pending.id}{_SUFFIX}")
        except TraceFormatError as exc:
            return [str(exc)]
        count, where = nonfinite_values(document)
        if count and not pending.allow_nonfinite:
            return nonfinite_message(
                pending.name, pending.file, count, where, received="the pending trace", outcome="it was not accepted"
            )
        return None

    def accept(self, pending: Pending) -> Accepted | list[str]:
        """Write the pending trace over its snapshot and remove it, or say why not (`refusal`)."""
        with self._locked(pending.id):
            refused = self.refusal(pending)
            text = self.text(pending)
            if refused is not None or text is None:
                return refused or ["the pending trace is missing"]
            write_snapshot(self.path(pending.file), text)
            meta, trace = self._paths(pending.id)
            meta.unlink(missing_ok=True)
            trace.unlink(missing_ok=True)
        who = pending.test if pending.name == pending.test.rsplit("::", 1)[-1] else f"{pending.test} ({pending.name})"
        lines = changed_lines(f"{who} -> {pending.file}", pending.verdict, pending.changes)
        return Accepted(pending, tuple(lines))


def select(entries: Sequence[Pending | Broken], wanted: Sequence[str]) -> tuple[list[Pending | Broken], list[str]]:
    """The entries `wanted` names (an id, a test's node id: all its snapshots, or a snapshot file), in order and each
    once, and the names that match none."""
    chosen: list[Pending | Broken] = []
    unknown: list[str] = []
    for name in wanted:
        key = name.replace("\\", "/")
        matched = [
            e
            for e in entries
            if e.id == key or (isinstance(e, Pending) and (key in (e.test, e.file) or e.test.startswith(f"{key}[")))
        ]
        if not matched:
            unknown.append(name)
        chosen += [e for e in matched if e not in chosen]
    return chosen, unknown
