"""`GenerationRecorder`: a `TrainerCallback` that records how decoding evolves during training and evaluation.

A fine-tune that breaks decoding (a model that never learns EOS, a collapse into repetition) shows up in the token
paths long before it shows in the loss. The recorder captures a `GenerationTrace` of fixed probe prompts and/or of
the first examples of each `evaluate()`/`predict()` at chosen moments; `.history` is the list of those checkpoints
(data model in history.py) and can be snapshotted like a trace. Each recording can raise an alarm when the model
loops (`on_degenerate`) and adds a few figures to the Trainer's own logs.

The evaluated examples come from the callback kwargs' `eval_dataloader`, never from `on_prediction_step`: the Trainer
calls that hook without the batch (`on_prediction_step(args, state, control, **kwargs)`, transformers 4.57 and 5.x
alike), so a callback written as `on_prediction_step(self, ..., inputs, **kw)` never sees its inputs.

The recorder must not change the training it watches: it records on the main process only (a tensor-parallel model
on every rank, whose forward pass needs them all; the main process keeps the trace), in eval mode under
no_grad (`record()` restores the previous mode), with a copy of the generation config, and with every RNG stream
(python, numpy, torch CPU and CUDA, and the evaluation DataLoader's own generators) saved and restored, so the
weights after training are bitwise identical with and without it, sampling probes and eval recordings included.
"""

from __future__ import annotations

import contextlib
import warnings
import weakref
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from transformers import TrainerCallback

from pytest_genguard.core import validation
from pytest_genguard.core.errors import GenguardTrainingWarning
from pytest_genguard.core.history import Checkpoint, RecorderHistory
from pytest_genguard.core.repetition import find_repetition
from pytest_genguard.hf import prompt_forms, tensor_parallel
from pytest_genguard.hf._generation import decoding
from pytest_genguard.hf.environment import training_libraries
from pytest_genguard.hf.inputs import check_seeded
from pytest_genguard.hf.prompt_forms import Form
from pytest_genguard.hf.record import generate_from_ids, record
from pytest_genguard.hf.run_state import (
    eval_rows,
    latest_loss,
    metric_prefix,
    preserved_rng,
    recording_figures,
    training_identity,
)

if TYPE_CHECKING:
    from transformers import (
        PreTrainedModel,
        PreTrainedTokenizerBase,
        Trainer,
        TrainerControl,
        TrainerState,
        TrainingArguments,
    )

    from pytest_genguard.core.trace import GenerationTrace

__all__ = ["ON_DEGENERATE", "GenerationRecorder"]

ON_DEGENERATE: tuple[str | None, ...] = (None, "warn", "stop")
_FIGURE_PREFIX = {"step": "", "train_end": "", "evaluate": "eval_", "predict": "test_"}
"""Log keys follow the Trainer's own metric prefixes (report_to integrations group `eval_*` and `test_*` keys)."""


# ---------------------------------------------------------------------------------------------------- callback


class GenerationRecorder(TrainerCallback):  # type: ignore[misc]
    """Records a `GenerationTrace` during training and evaluation; `.history` holds the `Checkpoint`s.

    What is recorded: the probe `prompts` every `every_n_steps` optimizer steps, at each `evaluate()` and at the end
    of training; with `eval_examples=N`, also the first N examples of the data each `evaluate()` (event "evaluate")
    and `predict()` (event "predict") runs on, read from the callback kwargs' `eval_dataloader`: an encoder-decoder
    model's encoder input ids as they are (padding aside), a decoder-only model's first `eval_prompt_tokens` tokens.
    At least one of the two is required. An evaluate/predict checkpoint holds the probes first, then the examples.

    `on_degenerate="warn"` checks each new trace with the rule and defaults of `assert_no_repetition` and emits a
    `GenguardTrainingWarning` naming the step, the prompt and the looping span; `"stop"` also ends training at that
    step (`control.should_training_stop`). Each recording adds figures (`genguard/min_margin`, `genguard/eos_rate`,
    `genguard/repetition`, `genguard/new_tokens`; `eval_`/`test_`-prefixed at evaluate/predict) to the Trainer's
    log history (trainer_state.json) and, at evaluate/predict, to the returned metrics; `attach(trainer)` sends them
    through `trainer.log()`, so report_to integrations (TensorBoard, W&B, ...) get them too.

    A probe is any prompt `record()` takes: a string, a list of token ids, or a conversation (a list of ``{"role",
    "content"}`` messages, with `chat_template_kwargs=` if wanted), encoded as `record()` encodes it.
    The tokenizer comes from `tokenizer=`, else the Trainer's `processing_class` (transformers 5), else its
    `tokenizer` (4.x). Other keyword arguments go to `record()` / `generate()` (e.g. `do_sample=True, seed=0`).
    At most one checkpoint per optimizer step: the end of training is not recorded again when the last step was
    (unless `load_best_model_at_end` may have changed the weights since). Only the main process records, so a
    model sharded across ranks (FSDP, DeepSpeed ZeRO-3), whose forward pass needs every rank, cannot be recorded;
    in a distributed run the eval examples are the first N of the main process's share of the data.
    """

    def __init__(
        self,
        prompts: str | Sequence[Any] | None = None,
        *,
        eval_examples: int = 0,
        eval_prompt_tokens: int = 8,
        every_n_steps: int | None = None,
        on_evaluate: bool = True,
        on_train_end: bool = True,
        on_degenerate: str | None = None,
        max_new_tokens: int = 24,
        top_k: int = 5,
        tokenizer: PreTrainedTokenizerBase | None = None,
        **generate_kwargs: Any,
    ) -> None:
        where = "GenerationRecorder()"
        prompt_list: list[Form] = []
        if prompts is not None:  # any prompt record() takes: text, token ids, a conversation
            texts, forms = prompt_forms.checked(prompts, where=where)
            prompt_list = list(texts) if forms is None else forms
        prompt_forms.chat_kwargs(generate_kwargs.get(prompt_forms.CHAT_SETTING), prompt_list, where=where)
        eval_examples = validation.integer(eval_examples, "eval_examples", minimum=0, where=where)
        eval_prompt_tokens = validation.integer(eval_prompt_tokens, "eval_prompt_tokens", minimum=1, where=where)
        max_new_tokens = validation.integer(max_new_tokens, "max_new_tokens", minimum=1, where=where)
        top_k = validation.integer(top_k, "top_k", minimum=1, where=where)
        if not prompt_list and not eval_examples:
            raise ValueError(
                "GenerationRecorder: nothing to record. Pass probe prompts (GenerationRecorder(['the cat'])), "
                "eval_examples=N (the first N examples of each evaluate()/predict()), or both."
            )
        if every_n_steps is not None:  # None: record only at evaluations and at the end of training
            every_n_steps = validation.integer(every_n_steps, "every_n_steps", minimum=1, where=where)
        if every_n_steps is not None and not prompt_list:
            raise ValueError(
                f"GenerationRecorder(every_n_steps={every_n_steps}): training steps record the probe prompts, and "
                "there are none; pass prompts=[...] too, or drop every_n_steps (eval_examples are recorded at "
                "evaluate() and predict())."
            )
        if on_degenerate not in ON_DEGENERATE:
            raise ValueError(f"GenerationRecorder(on_degenerate={on_degenerate!r}): must be None, 'warn' or 'stop'.")
        self.prompts: list[Form] = prompt_list
        self.eval_examples = eval_examples
        self.eval_prompt_tokens = eval_prompt_tokens
        self.every_n_steps = every_n_steps
        self.record_on_evaluate = on_evaluate
        self.record_on_train_end = on_train_end
        self.on_degenerate = on_degenerate
        self.max_new_tokens = max_new_tokens
        self.top_k = top_k
        self.tokenizer = tokenizer
        self.generate_kwargs = dict(generate_kwargs)
        self.history = RecorderHistory()
        self._trainer: weakref.ref[Trainer] | None = None
        self._identity: str | None = None

    def attach(self, trainer: Trainer) -> GenerationRecorder:
        """Add the recorder to `trainer`'s callbacks (unless it is there already) and log its figures with
        `trainer.log()`, so that report_to integrations receive them. A callback is otherwise never handed the
        Trainer, and integrations run before user callbacks, so they would not see figures added to a log later."""
        if not any(cb is self for cb in trainer.callback_handler.callbacks):
            trainer.add_callback(self)
        self._trainer = weakref.ref(trainer)
        return self

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

    def _encoded_probes(self, tokenizer: PreTrainedTokenizerBase) -> prompt_forms.Encoded:
        """The probes as record() encodes them: text tokenized, ids as given, conversations with the chat template."""
        where = "GenerationRecorder()"
        chat = prompt_forms.chat_kwargs(self.generate_kwargs.get(prompt_forms.CHAT_SETTING), self.prompts, where=where)
        return prompt_forms.encode(tokenizer, self.prompts, chat, where=where)

    def _generate(
        self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, examples: list[list[int]]
    ) -> GenerationTrace:
        kwargs = dict(self.generate_kwargs)
        if not examples:
            return record(
                model, tokenizer, self.prompts, max_new_tokens=self.max_new_tokens, top_k=self.top_k, **kwargs
            )
        # The probes as record() encodes them (and keeps their conversations), then the examples: their token ids.
        kwargs.pop(prompt_forms.CHAT_SETTING, None)
        probes = self._encoded_probes(tokenizer)
        n = len(examples)
        batch = prompt_forms.Encoded(
            texts=[*probes.texts, *(tokenizer.decode(r) for r in examples)],
            ids=[*probes.ids, *(tuple(r) for r in examples)],
            messages=[*probes.messages, *[None] * n],
            from_ids=[*probes.from_ids, *[False] * n],
            settings=probes.settings,
        )
        trace, _, _ = generate_from_ids(
            model,
            tokenizer,
            batch.texts,
            batch.ids,
            encoded=batch,
            max_new_tokens=self.max_new_tokens,
            top_k=self.top_k,
            **kwargs,
        )
        return trace

    def _record(
        self, state: TrainerState, control: TrainerControl, kwargs: dict[str, Any], event: str, *, examples: bool
    ) -> None:
        model: PreTrainedModel | None = kwargs.get("model")
        # A tensor-parallel model's forward pass needs every rank: they all record, the main process keeps it.
        every_rank = model is not None and tensor_parallel.world_size(model) is not None
        if not state.is_world_process_zero and not every_rank:
            return
        if model is None:
            raise ValueError(
                f"GenerationRecorder: the Trainer passed no model to the {event!r} callback; use the recorder "
                "with a transformers Trainer or pass model= when calling its hooks."
            )
        tokenizer = self.resolve_tokenizer(kwargs)
        rows: list[list[int]] = []
        with preserved_rng():
            if examples:
                rows = self._eval_rows(model, tokenizer, kwargs.get("eval_dataloader"), event)
            if not rows and not self.prompts:
                return  # an empty evaluation set and no probes: nothing was generated
            trace = self._generate(model, tokenizer, rows)
        if not state.is_world_process_zero:
            return
        if self._identity is not None and trace.model is not None and trace.model.recipe is None:
            trace = replace(trace, model=replace(trace.model, recipe=self._identity))
        trace = replace(trace, environment={**trace.environment, **training_libraries()})
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
        found = find_repetition(trace)
        figures = recording_figures(trace, len(found.prompts))
        prefix = metric_prefix(kwargs.get("metrics"), _FIGURE_PREFIX[event])
        self._log({f"{prefix}genguard/{k}": v for k, v in figures.items()}, state, control, kwargs.get("metrics"))
        if found and self.on_degenerate is not None:
            stop = self.on_degenerate == "stop"
            warnings.warn(
                f"GenerationRecorder: the model loops at step {state.global_step} ({event}): {found.headline}"
                + ("; training stops here (on_degenerate='stop')" if stop else ""),
                GenguardTrainingWarning,
                stacklevel=3,
            )
            if stop:
                control.should_training_stop = True

    def _eval_rows(
        self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, dataloader: Any, event: str
    ) -> list[list[int]]:
        if dataloader is None:
            raise ValueError(
                f"GenerationRecorder(eval_examples={self.eval_examples}): the {event!r} callback got no "
                "eval_dataloader; the Trainer passes it during evaluate() and predict() (pass eval_dataloader= "
                "when calling the hooks yourself)."
            )
        return eval_rows(
            dataloader,
            self.eval_examples,
            encoder_decoder=bool(getattr(model.config, "is_encoder_decoder", False)),
            prompt_tokens=self.eval_prompt_tokens,
            pad_token_id=tokenizer.pad_token_id,
        )

    def _log(self, figures: dict[str, float], state: TrainerState, control: TrainerControl, metrics: Any) -> None:
        """Into the metrics evaluate()/predict() return, and into the log: through the attached Trainer's `log()`
        (integrations included), else as an entry of `state.log_history` in the form `Trainer.log()` writes."""
        if isinstance(metrics, dict):
            metrics.update(figures)
        trainer = self._trainer() if self._trainer is not None else None
        if trainer is not None:
            should_log = control.should_log
            trainer.log(dict(figures))
            control.should_log = should_log  # logging clears the flag: the step's own loss log must still happen
            return
        entry: dict[str, Any] = dict(figures)
        if state.epoch is not None:
            entry["epoch"] = state.epoch
        state.log_history.append({**entry, "step": state.global_step})

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        tokenizer = self.resolve_tokenizer(kwargs)  # fail before the first step, not after minutes of training
        if prompt_forms.has_conversation(self.prompts):  # a tokenizer without a chat template: said now, too
            self._encoded_probes(tokenizer)
        model = kwargs.get("model")
        if model is not None:  # sampling from the call or the model's generation config
            sampling = decoding(model, tokenizer, {k: v for k, v in self.generate_kwargs.items() if k != "seed"})[1]
            check_seeded(sampling, self.generate_kwargs.get("seed"), "GenerationRecorder()")
        if model is not None and state.is_world_process_zero:
            self._identity = training_identity(model, tokenizer, args)
        integrations = [r for r in (getattr(args, "report_to", None) or []) if r != "none"]
        if integrations and self._trainer is None and state.is_world_process_zero:
            warnings.warn(
                f"GenerationRecorder: its figures go to trainer_state.json but not to report_to {integrations}; "
                "use GenerationRecorder(...).attach(trainer) instead of Trainer(callbacks=[recorder]) to log them "
                "there too.",
                UserWarning,
                stacklevel=2,
            )

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        if self.every_n_steps is not None and state.global_step % self.every_n_steps == 0:
            self._record(state, control, kwargs, "step", examples=False)

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
            self._record(state, control, kwargs, "evaluate", examples=self.eval_examples > 0)

    def on_predict(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        if self.eval_examples:
            self._record(state, control, kwargs, "predict", examples=True)

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if not self.record_on_train_end or not self.prompts:
            return
        already = bool(self.history) and self.history[-1].step == state.global_step
        if already and not getattr(args, "load_best_model_at_end", False):
            return  # the weights are those the last checkpoint recorded
        self._record(state, control, kwargs, "train_end", examples=False)
