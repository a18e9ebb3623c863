"""Fine-tuning a recipe with the `Trainer` users run (decoder-only: `Trainer`; T5: `Seq2SeqTrainer`), on the CPU, one
thread, with a `GenerationRecorder` on the probe prompts; the caller's RNG streams are left as they were.
"""

from __future__ import annotations

import dataclasses
import inspect
import tempfile
import time
from typing import TYPE_CHECKING, Any

from pytest_genguard.core import events
from pytest_genguard.core.history import RecorderHistory
from pytest_genguard.hf.recipe import (
    LR_SCHEDULER,
    RECORD_MAX_NEW_TOKENS,
    RECORD_TOP_K,
    TRAIN_THREADS,
    Collator,
    Recipe,
    examples_for,
)
from pytest_genguard.hf.run_state import preserved_rng

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerFast

__all__ = ["train", "training_arguments", "training_defaults"]


def training_arguments(spec: Recipe, output_dir: str, progress: bool) -> Any:
    """TrainingArguments for transformers 5 or 4.x, chosen by the signature (not the version string)."""
    from transformers import Seq2SeqTrainingArguments, TrainingArguments

    cls: Any = Seq2SeqTrainingArguments if spec.arch == "t5" else TrainingArguments
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {
        "output_dir": output_dir,
        "max_steps": spec.steps,
        "per_device_train_batch_size": spec.batch_size,
        "learning_rate": spec.learning_rate,
        "lr_scheduler_type": LR_SCHEDULER,
        "warmup_steps": 0,
        "seed": spec.seed,
        "data_seed": spec.seed,
        "logging_steps": spec.every_n_steps,
        "save_strategy": "no",
        "report_to": "none",
        "disable_tqdm": not progress,
    }
    kwargs["eval_strategy" if "eval_strategy" in names else "evaluation_strategy"] = "no"
    kwargs["use_cpu" if "use_cpu" in names else "no_cuda"] = True
    if spec.arch == "t5":
        kwargs["predict_with_generate"] = True
    return cls(**kwargs)


def training_defaults() -> dict[str, Any]:
    """The optimizer settings the Trainer fills in (they change the weights), read without building arguments."""
    from transformers import TrainingArguments

    defaults = {f.name: f.default for f in dataclasses.fields(TrainingArguments)}
    names = ("optim", "weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon", "max_grad_norm")
    return {n: str(defaults.get(n)) for n in names}


def train(
    spec: Recipe, model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast, progress: bool
) -> tuple[RecorderHistory, float]:
    """Fine-tune `model` in place, on the CPU; the caller's RNG streams are left as they were (the Trainer reseeds
    them). Always the CPU: tiny models gain nothing from a GPU, and CPU-trained weights are the same model wherever
    the tests then run it, so `--genguard-gpu` compares CUDA decoding against the CPU snapshots of the same weights."""
    import torch
    from transformers import Seq2SeqTrainer, Trainer
    from transformers.trainer_callback import PrinterCallback

    # The recorder is a transformers TrainerCallback: importing it imports transformers, so only when training.
    from pytest_genguard.hf.recorder import GenerationRecorder

    recorder = GenerationRecorder(
        list(spec.prompts),
        every_n_steps=spec.every_n_steps,
        max_new_tokens=RECORD_MAX_NEW_TOKENS,
        top_k=RECORD_TOP_K,
    )
    trainer_cls: Any = Seq2SeqTrainer if spec.arch == "t5" else Trainer
    params = inspect.signature(trainer_cls.__init__).parameters
    tokenizer_kw = "processing_class" if "processing_class" in params else "tokenizer"
    use_cache = getattr(model.config, "use_cache", None)
    threads = torch.get_num_threads()
    start = time.perf_counter()
    # muted: the recordings of a half-trained model are not the running test's (and a warm load makes none).
    with preserved_rng(), events.muted(), tempfile.TemporaryDirectory(prefix="genguard-trainer-") as output_dir:
        trainer = trainer_cls(
            model=model,
            args=training_arguments(spec, output_dir, progress),
            train_dataset=examples_for(spec, tokenizer),
            data_collator=Collator(int(tokenizer.pad_token_id)),
            callbacks=[recorder],
            **{tokenizer_kw: tokenizer},
        )
        if not progress:
            trainer.remove_callback(PrinterCallback)  # it prints every log dict when tqdm is off
        # One thread: tiny models gain nothing from more (and lose 10x on a busy machine), and the weights then do
        # not depend on the machine's core count.
        torch.set_num_threads(TRAIN_THREADS)
        try:
            trainer.train()
        finally:
            torch.set_num_threads(threads)
    seconds = time.perf_counter() - start
    if use_cache is not None:
        model.config.use_cache = use_cache  # the Trainer writes its own use_cache into the config
    model.eval()
    return recorder.history, seconds
