"""`GenerationRecorder`: a `TrainerCallback` that records how decoding of probe prompts evolves during training.

A fine-tune that breaks decoding (a model that never learns EOS, a collapse into repetition) shows up in the token
paths long before it shows in the loss. The recorder captures a `GenerationTrace` of its probe prompts at chosen
moments; `.history` is the list of those checkpoints and can be snapshotted like a trace.

The recorder must not change the training it watches: it records on the main process only, in eval mode under
no_grad (`record()` restores the previous mode), with a copy of the generation config, and with every RNG stream
(python, numpy, torch CPU and CUDA) saved and restored, so the weights after training are bitwise identical with and
without it, sampling probes included.
"""

from __future__ import annotations

import contextlib
import json
import math
import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from transformers import TrainerCallback

from pytest_genguard.trace import GenerationTrace, TraceFormatError, dumps, loads

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase, TrainerControl, TrainerState, TrainingArguments

__all__ = [
    "HISTORY_FORMAT",
    "Checkpoint",
    "GenerationRecorder",
    "RecorderHistory",
    "history_from_json",
    "history_to_json",
    "preserved_rng",
]

HISTORY_FORMAT = 1
EVENTS: tuple[str, ...] = ("step", "evaluate", "train_end")


@dataclass(frozen=True)
class Checkpoint:
    """One recording during training: where training was (`step`, `epoch`, latest training `loss`), why it was
    recorded (`event`: "step", "evaluate" or "train_end") and what the probe prompts generated (`trace`)."""

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


def _exact(value: float | None) -> str:
    """Loss and epoch are not float32 data: written exactly (repr), NaN/inf as strings like trace.py does."""
    if value is None:
        return "null"
    if math.isnan(value):
        return '"nan"'
    if math.isinf(value):
        return '"inf"' if value > 0 else '"-inf"'
    return repr(float(value))


def history_to_json(history: Iterable[Checkpoint]) -> str:
    """The history as JSON: one header line per checkpoint, each trace embedded in trace.py's own layout."""
    blocks = []
    for c in history:
        trace_text = dumps(c.trace).rstrip("\n").replace("\n", "\n      ")
        blocks.append(
            "    {\n"
            f'      "step": {int(c.step)}, "epoch": {_exact(c.epoch)}, "loss": {_exact(c.loss)}, '
            f'"event": {json.dumps(c.event)},\n'
            f'      "trace": {trace_text}\n'
            "    }"
        )
    checkpoints = "[\n" + ",\n".join(blocks) + "\n  ]" if blocks else "[]"
    return f'{{\n  "genguard_history": {HISTORY_FORMAT},\n  "checkpoints": {checkpoints}\n}}\n'


_SPECIAL = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def _history_error(source: str, problem: str) -> TraceFormatError:
    return TraceFormatError(
        f"{source}: {problem}. The recorder history is corrupt or was edited by hand; re-record it "
        "(for snapshots: pytest --snapshot-update)."
    )


def _optional_number(raw: Any, where: str, source: str) -> float | None:
    if raw is None:
        return None
    if isinstance(raw, str) and raw in _SPECIAL:
        return _SPECIAL[raw]
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


# ---------------------------------------------------------------------------------------------------- RNG


@contextlib.contextmanager
def preserved_rng() -> Iterator[None]:
    """Save python `random`, numpy, torch CPU and (initialised) CUDA RNG states, and restore them afterwards."""
    import torch

    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy comes with transformers
        np = None  # type: ignore[assignment]
    py_state = random.getstate()
    np_state = np.random.get_state() if np is not None else None
    cpu_state = torch.get_rng_state()
    cuda_live = torch.cuda.is_available() and torch.cuda.is_initialized()  # type: ignore[no-untyped-call]
    cuda_states = torch.cuda.get_rng_state_all() if cuda_live else None
    try:
        yield
    finally:
        random.setstate(py_state)
        if np is not None and np_state is not None:
            np.random.set_state(np_state)
        torch.set_rng_state(cpu_state)
        if cuda_states is not None:
            torch.cuda.set_rng_state_all(cuda_states)


def latest_loss(log_history: Sequence[dict[str, Any]]) -> float | None:
    """The most recent training loss in a Trainer's `state.log_history` (None before the first log)."""
    for entry in reversed(log_history):
        if "loss" in entry:
            try:
                return float(entry["loss"])
            except (TypeError, ValueError):
                return None
    return None


# ---------------------------------------------------------------------------------------------------- callback


class GenerationRecorder(TrainerCallback):  # type: ignore[misc]
    """Records a `GenerationTrace` of `prompts` every `every_n_steps` optimizer steps, at each evaluation and at the
    end of training; `.history` holds the `Checkpoint`s.

    The tokenizer comes from `tokenizer=`, else the Trainer's `processing_class` (transformers 5), else its
    `tokenizer` (4.x). Other keyword arguments go to `record()` / `generate()` (e.g. `do_sample=True, seed=0`).
    At most one checkpoint per optimizer step: the end of training is not recorded again when the last step was
    (unless `load_best_model_at_end` may have changed the weights since). Only the main process records, so a
    model sharded across ranks (FSDP, DeepSpeed ZeRO-3), whose forward pass needs every rank, cannot be recorded.
    """

    def __init__(
        self,
        prompts: str | Sequence[str],
        *,
        every_n_steps: int | None = None,
        on_evaluate: bool = True,
        on_train_end: bool = True,
        max_new_tokens: int = 24,
        top_k: int = 5,
        tokenizer: PreTrainedTokenizerBase | None = None,
        **generate_kwargs: Any,
    ) -> None:
        prompt_list = [prompts] if isinstance(prompts, str) else list(prompts)
        if not prompt_list or not all(isinstance(p, str) for p in prompt_list):
            raise ValueError("GenerationRecorder(prompts=...): pass a prompt or a non-empty list of prompt strings.")
        if every_n_steps is not None and (isinstance(every_n_steps, bool) or every_n_steps < 1):
            raise ValueError(
                f"GenerationRecorder(every_n_steps={every_n_steps!r}): must be a positive number of steps, "
                "or None to record only at evaluations and at the end of training."
            )
        if max_new_tokens < 1:
            raise ValueError(f"GenerationRecorder(max_new_tokens={max_new_tokens}): must be >= 1.")
        if top_k < 1:
            raise ValueError(f"GenerationRecorder(top_k={top_k}): must be >= 1.")
        self.prompts: list[str] = prompt_list
        self.every_n_steps = every_n_steps
        self.record_on_evaluate = on_evaluate
        self.record_on_train_end = on_train_end
        self.max_new_tokens = max_new_tokens
        self.top_k = top_k
        self.tokenizer = tokenizer
        self.generate_kwargs = dict(generate_kwargs)
        self.history = RecorderHistory()

    def resolve_tokenizer(self, kwargs: dict[str, Any]) -> PreTrainedTokenizerBase:
        """The tokenizer to record with: the constructor's, else the callback's `processing_class`/`tokenizer`."""
        for candidate in (self.tokenizer, kwargs.get("processing_class"), kwargs.get("tokenizer")):
            if candidate is None:
                continue
            # A multimodal processor wraps its tokenizer.
            inner = getattr(candidate, "tokenizer", None)
            tokenizer: PreTrainedTokenizerBase = candidate if hasattr(candidate, "pad_token_id") else inner
            if tokenizer is not None:
                return tokenizer
        raise ValueError(
            "GenerationRecorder: no tokenizer to encode the probe prompts with. Pass "
            "GenerationRecorder(prompts, tokenizer=tokenizer), or give the Trainer the tokenizer "
            "(Trainer(processing_class=tokenizer) on transformers 5, Trainer(tokenizer=tokenizer) on 4.x)."
        )

    def _record(self, state: TrainerState, kwargs: dict[str, Any], event: str) -> None:
        if not state.is_world_process_zero:
            return
        model: PreTrainedModel | None = kwargs.get("model")
        if model is None:
            raise ValueError(
                f"GenerationRecorder: the Trainer passed no model to the {event!r} callback; use the recorder "
                "with a transformers Trainer or pass model= when calling its hooks."
            )
        tokenizer = self.resolve_tokenizer(kwargs)
        from pytest_genguard.record import record

        with preserved_rng():
            trace = record(
                model,
                tokenizer,
                self.prompts,
                max_new_tokens=self.max_new_tokens,
                top_k=self.top_k,
                **self.generate_kwargs,
            )
        epoch = float(state.epoch) if state.epoch is not None else None
        self.history.append(
            Checkpoint(
                step=int(state.global_step),
                epoch=epoch,
                loss=latest_loss(state.log_history),
                event=event,
                trace=trace,
            )
        )

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self.resolve_tokenizer(kwargs)  # fail before the first step, not after minutes of training

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        if self.every_n_steps is not None and state.global_step % self.every_n_steps == 0:
            self._record(state, kwargs, "step")

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        # The Trainer logs a step's loss after on_step_end: give that step's checkpoint its own loss.
        if self.history and logs and "loss" in logs and self.history[-1].step == state.global_step:
            with contextlib.suppress(TypeError, ValueError):
                self.history[-1] = replace(self.history[-1], loss=float(logs["loss"]))

    def on_evaluate(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        if self.record_on_evaluate:
            self._record(state, kwargs, "evaluate")

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if not self.record_on_train_end:
            return
        already = bool(self.history) and self.history[-1].step == state.global_step
        if already and not getattr(args, "load_best_model_at_end", False):
            return  # the weights are those the last checkpoint recorded
        self._record(state, kwargs, "train_end")
