"""The events genguard checks emit for the running test (terminal summary, HTML report), as typed dataclasses.

Library code (snapshot comparisons, invariants, `record()`, `verify()`) calls `emit()` with one event; outside a test
it is a no-op. The plugin opens a list per test (`begin`/`end`) and copies it, as `to_json()` dicts, into the test
report's `user_properties`, which pytest-xdist sends from workers to the controller; `from_json()` reads them back
there. Standard library only: the trace-only checks emit too.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pytest_genguard.core.jsontext import JSONScalar
from pytest_genguard.core.verdict import Status, Verdict

__all__ = [
    "CheckEvent",
    "Event",
    "FragileStep",
    "InvariantEvent",
    "PinEvent",
    "RecordEvent",
    "begin",
    "emit",
    "end",
    "events_from_json",
    "from_json",
    "muted",
    "parse_verdict",
    "to_json",
]

CheckKind = Literal["snapshot", "verify", "reference"]


def parse_verdict(value: object) -> Verdict | Status:
    """A verdict read back from JSON ("regression", "created", ...); an unknown value is `Status.FAILED`."""
    text = str(value)
    for enum in (Verdict, Status):
        try:
            return enum(text)
        except ValueError:
            continue
    return Status.FAILED


@dataclass(frozen=True)
class CheckEvent:
    """A snapshot, `verify()` or reference check: its verdict (a `Verdict`, or a `Status` such as created, missing,
    invalid), whether it failed, the first line and the full text of its explanation, and (on failure) both traces.

    Per-environment baselines add the trace's `environment_class`, the `baseline` compared with (a class, "shared
    fallback" or None) and its `baseline_file`; an updated snapshot adds what it `was` and the `changes` it accepted;
    a reference check adds the `reference` file, whether it was `bitwise`, the `environment_diff` and per-prompt
    outcomes (`prompts`). A comparison adds what it found changed (`change`: `core.change.Change.to_json()`); a
    failed one whose new trace was kept for review, the `pending` id (`genguard review --accept ID`).
    """

    kind: CheckKind
    verdict: Verdict | Status
    failure: bool
    summary: str
    detail: str = ""
    name: str = ""
    expected: str | None = None
    actual: str | None = None
    file: str | None = None
    via: str | None = None
    per_env: bool = False
    environment_class: str | None = None
    baseline: str | None = None
    baseline_file: str | None = None
    was: str | None = None
    changes: tuple[str, ...] | None = None
    reference: str | None = None
    bitwise: bool | None = None
    environment_diff: tuple[tuple[str, JSONScalar, JSONScalar], ...] | None = None
    prompts: tuple[Mapping[str, Any], ...] | None = None
    change: Mapping[str, Any] | None = None
    pending: str | None = None


@dataclass(frozen=True)
class InvariantEvent:
    """An invariant (`assert_no_repetition`, `assert_deterministic`, ...) that held or not."""

    name: str
    ok: bool
    summary: str
    kind: Literal["invariant"] = "invariant"

    @property
    def failure(self) -> bool:
        return not self.ok


@dataclass(frozen=True)
class FragileStep:
    """A recorded step whose top-1/top-2 margin is within the tie tolerance (`Tolerances.near_tie`)."""

    prompt: int
    text: str
    step: int
    margin: float


@dataclass(frozen=True)
class RecordEvent:
    """A `record()` call: how many of its steps are fragile (the first 50 named), of how many prompts and steps."""

    fragile_steps: int
    fragile: tuple[FragileStep, ...] = ()
    prompts: int = 0
    steps: int = 0
    kind: Literal["record"] = "record"


PinAction = Literal["loaded", "created", "re-pinned"]


@dataclass(frozen=True)
class PinEvent:
    """A pin folder a test used: loaded, written for the first time (``--snapshot-update``) or re-trained and
    rewritten (``--genguard-rebuild``), with what moved (`changes`, for a re-pin)."""

    folder: str
    action: PinAction
    changes: tuple[str, ...] = ()
    kind: Literal["pin"] = "pin"


Event = CheckEvent | InvariantEvent | RecordEvent | PinEvent

_OPTIONAL = ("expected", "actual", "file", "via", "was", "reference", "bitwise", "pending")


def to_json(event: Event) -> dict[str, Any]:
    """The event as a JSON-able dict (what crosses pytest-xdist in `user_properties`); unset optional fields are left
    out, so each kind keeps the shape CONTRIBUTING.md documents."""
    if isinstance(event, InvariantEvent):
        return {
            "kind": "invariant",
            "name": event.name,
            "ok": event.ok,
            "failure": event.failure,
            "summary": event.summary,
        }
    if isinstance(event, PinEvent):
        return {"kind": "pin", "folder": event.folder, "action": event.action, "changes": list(event.changes)}
    if isinstance(event, RecordEvent):
        fragile = [{"prompt": s.prompt, "text": s.text, "step": s.step, "margin": s.margin} for s in event.fragile]
        return {
            "kind": "record",
            "fragile_steps": event.fragile_steps,
            "fragile": fragile,
            "prompts": event.prompts,
            "steps": event.steps,
        }
    out: dict[str, Any] = {
        "kind": event.kind,
        "verdict": str(event.verdict),
        "failure": event.failure,
        "summary": event.summary,
        "detail": event.detail,
        "name": event.name,
    }
    if event.per_env:
        out.update(
            environment_class=event.environment_class, baseline=event.baseline, baseline_file=event.baseline_file
        )
    for key in _OPTIONAL:
        value = getattr(event, key)
        if value is not None:
            out[key] = value
    if event.environment_diff is not None:
        out["environment_diff"] = [list(d) for d in event.environment_diff]
    if event.changes is not None:
        out["changes"] = list(event.changes)
    if event.prompts is not None:
        out["prompts"] = [dict(p) for p in event.prompts]
    if event.change is not None:
        out["change"] = dict(event.change)
    return out


def from_json(raw: Mapping[str, Any]) -> Event:
    """An event from its `to_json()` form (missing fields take their defaults)."""
    kind = str(raw.get("kind"))
    if kind == "invariant":
        ok = bool(raw.get("ok", not raw.get("failure", False)))
        return InvariantEvent(str(raw.get("name", "")), ok, str(raw.get("summary", "")))
    if kind == "pin":
        written = str(raw.get("action"))
        action: PinAction = "created" if written == "created" else "re-pinned" if written == "re-pinned" else "loaded"
        return PinEvent(str(raw.get("folder", "")), action, tuple(str(c) for c in raw.get("changes", ())))
    if kind == "record":
        fragile = tuple(
            FragileStep(
                int(s.get("prompt", 0)), str(s.get("text", "")), int(s.get("step", 0)), float(s.get("margin", 0))
            )
            for s in raw.get("fragile", [])
        )
        return RecordEvent(
            int(raw.get("fragile_steps", 0)), fragile, int(raw.get("prompts", 0)), int(raw.get("steps", 0))
        )
    verdict = parse_verdict(raw.get("verdict"))
    diff = raw.get("environment_diff")
    prompts = raw.get("prompts")
    changes = raw.get("changes")
    change = raw.get("change")
    return CheckEvent(
        kind="reference" if kind == "reference" else "verify" if kind == "verify" else "snapshot",
        verdict=verdict,
        failure=bool(raw.get("failure")),
        summary=str(raw.get("summary", verdict)),
        detail=str(raw.get("detail", "")),
        name=str(raw.get("name", "")),
        expected=_text(raw.get("expected")),
        actual=_text(raw.get("actual")),
        file=_text(raw.get("file")),
        via=_text(raw.get("via")),
        per_env="environment_class" in raw,
        environment_class=_text(raw.get("environment_class")),
        baseline=_text(raw.get("baseline")),
        baseline_file=_text(raw.get("baseline_file")),
        was=_text(raw.get("was")),
        changes=None if changes is None else tuple(str(c) for c in changes),
        reference=_text(raw.get("reference")),
        bitwise=None if raw.get("bitwise") is None else bool(raw.get("bitwise")),
        environment_diff=None if diff is None else tuple((str(k), o, n) for k, o, n in diff),
        prompts=None if prompts is None else tuple(dict(p) for p in prompts),
        change=dict(change) if isinstance(change, Mapping) else None,
        pending=_text(raw.get("pending")),
    )


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def events_from_json(raw: Sequence[Mapping[str, Any]]) -> list[Event]:
    """`from_json` of each entry."""
    return [from_json(r) for r in raw]


# ------------------------------------------------------------------------------------------------------ collecting

_current: contextvars.ContextVar[list[Event] | None] = contextvars.ContextVar("genguard_events", default=None)


def emit(event: Event) -> None:
    """Record an event for the running test (a no-op outside a test, e.g. in a script)."""
    events = _current.get()
    if events is not None:
        events.append(event)


def begin(events: list[Event]) -> contextvars.Token[list[Event] | None]:
    """Collect the events emitted from now on into `events` (until `end`)."""
    return _current.set(events)


def end(token: contextvars.Token[list[Event] | None]) -> None:
    _current.reset(token)


@contextlib.contextmanager
def muted() -> Iterator[None]:
    """Drop the events emitted in the block: an invariant's many internal record() calls are not the test's."""
    token = _current.set(None)
    try:
        yield
    finally:
        _current.reset(token)
