"""The events genguard checks emit for the running test (terminal summary, HTML report).

Library code (snapshot comparisons, invariants, `record()`, `verify()`) calls `emit()`; outside a test it is a
no-op. The plugin opens a list per test (`begin`/`end`) and copies it into the test report's `user_properties`, which
pytest-xdist sends from workers to the controller. Standard library only: the trace-only checks emit too.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

__all__ = ["begin", "emit", "end", "muted"]

_current: contextvars.ContextVar[list[dict[str, Any]] | None] = contextvars.ContextVar("genguard_events", default=None)


def emit(kind: str, **data: Any) -> None:
    """Record an event for the running test (a no-op outside a test, e.g. in a script)."""
    events = _current.get()
    if events is not None:
        events.append({"kind": kind, **data})


def begin(events: list[dict[str, Any]]) -> contextvars.Token[list[dict[str, Any]] | None]:
    """Collect the events emitted from now on into `events` (until `end`)."""
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
