"""Pending traces in a pytest run (the format and the rules are `pytest_genguard.core.pending`'s): the snapshot
fixture keeps the new trace of a regression or a stale snapshot (`keep`) and clears it when the snapshot holds or is
written (`clear`); a test that did not fail drops the traces it kept (`settle`: a negative control that expects a
failing comparison leaves nothing to review).

What is kept is what ``--snapshot-update`` (or ``--genguard-update-stale``) would have written: the value's text for
``assert value == genguard_snapshot``, the trace recorded once more for ``verify(..., prompts=...)`` (verify() without
prompts cannot record, so it keeps nothing), the candidate's trace for a fidelity judgement of a trace. The traces
live in ``<rootdir>/.genguard/pending`` whatever pytest's cache settings; each snapshot file belongs to one test,
which pytest-xdist runs in one worker, and a file lock per pending id orders a run's writes against a
`genguard review` running at the same time. The plugin imports this module at start-up (`settle`): it loads the
snapshot side only where a trace is kept.
"""

from __future__ import annotations

import dataclasses
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_genguard.core import events
from pytest_genguard.core.change import Change
from pytest_genguard.core.documents import Outcome
from pytest_genguard.core.events import CheckEvent
from pytest_genguard.core.pending import PendingStore
from pytest_genguard.core.tolerances import Overrides
from pytest_genguard.core.verdict import Verdict
from pytest_genguard.plugin.settings import settings

if TYPE_CHECKING:
    from pytest_genguard.plugin.stores import Store
    from pytest_genguard.plugin.subjects import Subject

__all__ = ["KEPT_KEY", "clear", "keep", "pending_store", "settle"]

KEPT_KEY = pytest.StashKey[list[str]]()
"""The snapshot files (relative to the rootdir) whose pending traces the running test kept."""


def _file_lock(path: str) -> AbstractContextManager[Any]:
    from filelock import FileLock  # only where a trace is kept or cleared

    return FileLock(path)


def pending_store(config: pytest.Config) -> PendingStore:
    """The pending traces of this run's rootdir."""
    return PendingStore(config.rootpath, lock=_file_lock)


def keep(
    item: pytest.Item,
    subject: Subject,
    store: Store,
    outcome: Outcome,
    stored: str,
    change: Change | None,
    *,
    name: str,
    allow_nonfinite: bool,
    overrides: Overrides,
    per_env: bool,
) -> tuple[str | None, str | None]:
    """Keep the new trace of a regression or a stale snapshot for review: (its id, the explanation's line that says
    how to accept it, or why it was not kept); (None, None) for any other failure."""
    if outcome.verdict not in (Verdict.REGRESSION, Verdict.STALE) or not subject.can_write or not stored:
        return None, None
    if not settings(item.config).keep_pending:  # --genguard-no-pending
        return None, None
    from pytest_genguard.plugin.subjects import Refused  # syrupy: loaded by then (genguard_snapshot needs it)

    try:
        with events.muted():  # recording it again (verify()) is part of this check, not another one
            data, text = subject.written()
        changes = tuple(subject.changes(outcome, data))
    except Refused:
        return None, None  # NaN/inf: nothing a run would write either
    except Exception as exc:  # the verdict is the failure; a model that cannot record again is only a note
        return None, f"(the new trace was not kept for review: recording it raised {type(exc).__name__}: {exc})"
    file = Path(store.target).as_posix()
    try:
        record = pending_store(item.config).keep(
            text,
            stored,
            test=item.nodeid,
            name=name,
            file=file,
            compared=Path(store.source).as_posix(),
            verdict=str(outcome.verdict),
            summary=outcome.summary,
            via=subject.via,
            changes=changes,
            change=None if change is None else change.to_json(),
            allow_nonfinite=allow_nonfinite,
            overrides=overrides.as_dict(),
            per_env=per_env,
        )
    except OSError as exc:
        return None, f"(the new trace was not kept for review: {type(exc).__name__}: {exc})"
    item.stash.setdefault(KEPT_KEY, []).append(file)
    return record.id, f"the new trace is kept for review: genguard review --accept {record.id} (or genguard review)"


def clear(config: pytest.Config, file: str) -> None:
    """Remove the pending trace of snapshot `file` (it holds now, or was written)."""
    pending_store(config).clear(Path(file).as_posix())


def settle(item: pytest.Item, report: pytest.TestReport, collected: list[events.Event]) -> None:
    """After a test's call: when it did not fail, remove the pending traces it kept and their ids from its events."""
    kept = item.stash.get(KEPT_KEY, [])
    if report.when != "call" or not kept or report.failed:
        return
    pending = pending_store(item.config)
    for file in kept:
        pending.clear(file)
    kept.clear()
    for i, event in enumerate(collected):
        if isinstance(event, CheckEvent) and event.pending is not None:
            collected[i] = dataclasses.replace(event, pending=None)
