"""The recorder's history as data: `Checkpoint`, `RecorderHistory` and their JSON form.

Standard library only, like trace.py: reading a history (`genguard show`/`diff` of a history file, the snapshot
extension, the fine-tuning cache) must not import torch or transformers, which the recorder itself (a
`TrainerCallback`) needs.
The recorder's warning, `GenguardTrainingWarning`, is in `core/errors.py` with the others.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pytest_genguard.core.errors import TraceFormatError
from pytest_genguard.core.jsontext import SPECIAL_FLOATS, exact_number
from pytest_genguard.core.trace import GenerationTrace, dumps, loads

__all__ = [
    "EVENTS",
    "HISTORY_FORMAT",
    "Checkpoint",
    "RecorderHistory",
    "history_from_json",
    "history_to_json",
]


HISTORY_FORMAT = 1
EVENTS: tuple[str, ...] = ("step", "evaluate", "predict", "train_end")
"""Why a checkpoint was recorded: every `every_n_steps` steps, after `evaluate()`, after `predict()`, at the end of
training."""


@dataclass(frozen=True)
class Checkpoint:
    """One recording during training: where training was (`step`, `epoch`, latest training `loss`), why it was
    recorded (`event`: "step", "evaluate", "predict" or "train_end") and what the probe prompts (and, at evaluate and
    predict, the evaluated examples) generated (`trace`)."""

    step: int
    epoch: float | None
    loss: float | None
    event: str
    trace: GenerationTrace


class RecorderHistory(list[Checkpoint]):
    """The checkpoints of a `GenerationRecorder`, oldest first: a list with a diff-friendly JSON form."""

    def to_json(self) -> str:
        return history_to_json(self)

    @classmethod
    def from_json(cls, text: str, *, source: str = "<string>") -> RecorderHistory:
        return history_from_json(text, source=source)


# ---------------------------------------------------------------------------------------------------- JSON form


def history_to_json(history: Iterable[Checkpoint]) -> str:
    """The history as JSON: one header line per checkpoint, each trace embedded in trace.py's own layout."""
    blocks = []
    for c in history:
        trace_text = dumps(c.trace).rstrip("\n").replace("\n", "\n      ")
        blocks.append(
            "    {\n"
            f'      "step": {int(c.step)}, "epoch": {exact_number(c.epoch)}, "loss": {exact_number(c.loss)}, '
            f'"event": {json.dumps(c.event)},\n'
            f'      "trace": {trace_text}\n'
            "    }"
        )
    checkpoints = "[\n" + ",\n".join(blocks) + "\n  ]" if blocks else "[]"
    return f'{{\n  "genguard_history": {HISTORY_FORMAT},\n  "checkpoints": {checkpoints}\n}}\n'


def _history_error(source: str, problem: str) -> TraceFormatError:
    return TraceFormatError(
        f"{source}: {problem}. The recorder history is corrupt or was edited by hand; re-record it "
        "(for snapshots: pytest --snapshot-update)."
    )


def _optional_number(raw: Any, where: str, source: str) -> float | None:
    if raw is None:
        return None
    if isinstance(raw, str) and raw in SPECIAL_FLOATS:
        return SPECIAL_FLOATS[raw]
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        raise _history_error(source, f"{where}: expected a number or null, found {raw!r}")
    return float(raw)


def history_from_json(text: str, *, source: str = "<string>") -> RecorderHistory:
    """Parse `history_to_json` text; problems raise `TraceFormatError` naming `source` and the checkpoint."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise _history_error(source, f"not valid JSON ({exc})") from None
    if not isinstance(doc, dict) or "checkpoints" not in doc:
        raise _history_error(source, "not a recorder history (no 'checkpoints' list)")
    version = doc.get("genguard_history")
    if type(version) is not int or version != HISTORY_FORMAT:
        raise TraceFormatError(
            f"{source}: recorder history format {version!r} is not supported (this pytest-genguard reads format "
            f"{HISTORY_FORMAT}); re-record it with this version (pytest --snapshot-update)."
        )
    raw_checkpoints = doc["checkpoints"]
    if not isinstance(raw_checkpoints, list):
        raise _history_error(source, "'checkpoints' is not a list")
    history = RecorderHistory()
    for i, raw in enumerate(raw_checkpoints):
        where = f"checkpoints[{i}]"
        if not isinstance(raw, dict):
            raise _history_error(source, f"{where}: expected an object")
        step, event = raw.get("step"), raw.get("event")
        if isinstance(step, bool) or not isinstance(step, int):
            raise _history_error(source, f"{where}.step: expected an integer, found {step!r}")
        if event not in EVENTS:
            raise _history_error(source, f"{where}.event: {event!r} is not one of {', '.join(EVENTS)}")
        if "trace" not in raw:
            raise _history_error(source, f"{where}: missing key 'trace'")
        # Re-serialising the parsed trace is exact: json writes floats with repr, and trace.py parses its own text.
        trace = loads(json.dumps(raw["trace"]), source=f"{source}: {where}.trace")
        history.append(
            Checkpoint(
                step=step,
                epoch=_optional_number(raw.get("epoch"), f"{where}.epoch", source),
                loss=_optional_number(raw.get("loss"), f"{where}.loss", source),
                event=str(event),
                trace=trace,
            )
        )
    return history
