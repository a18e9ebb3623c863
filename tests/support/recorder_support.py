"""Plain user-side Trainer setups for the GenerationRecorder tests: tiny models, the shipped sentences as data, the
collators transformers ships. Only public API (no finetune.py internals), so they read like a user's script."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from transformers import (
    DataCollatorForLanguageModeling,
    DataCollatorForSeq2Seq,
    PreTrainedTokenizerBase,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
    Trainer,
    TrainingArguments,
)
from transformers.trainer_callback import PrinterCallback

from pytest_genguard.hf.tiny import finetune_texts, tiny_model, tiny_tokenizer


def decoder_examples(tokenizer: PreTrainedTokenizerBase) -> list[dict[str, list[int]]]:
    """The shipped sentences, each ending in EOS (6 to 11 tokens: some shorter than 8, so padding matters)."""
    return [{"input_ids": [*tokenizer(t)["input_ids"], int(tokenizer.eos_token_id)]} for t in finetune_texts()]


def seq2seq_examples(tokenizer: PreTrainedTokenizerBase) -> list[dict[str, list[int]]]:
    """Encoder input: a sentence's first two or three words (of different lengths); target: the rest and EOS."""
    out = []
    for i, text in enumerate(finetune_texts()):
        words = text.split()
        cut = 2 + i % 2
        source, target = " ".join(words[:cut]), " " + " ".join(words[cut:]) + str(tokenizer.eos_token)
        out.append({"input_ids": tokenizer(source)["input_ids"], "labels": tokenizer(target)["input_ids"]})
    return out


class IterableExamples(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """An evaluation set without a length or indexing: a stream, as `datasets`' streaming mode gives."""

    def __init__(self, items: list[dict[str, list[int]]]) -> None:
        self.items = items

    def __iter__(self) -> Iterator[dict[str, list[int]]]:
        yield from (dict(item) for item in self.items)


def arguments(tmp: Path, *, seq2seq: bool = False, **overrides: Any) -> TrainingArguments:
    settings: dict[str, Any] = {
        "output_dir": str(tmp),
        "max_steps": 6,
        "per_device_train_batch_size": 4,
        "per_device_eval_batch_size": 2,
        "learning_rate": 1e-2,
        "logging_steps": 2,
        "seed": 0,
        "use_cpu": True,
        "report_to": "none",
        "save_strategy": "no",
        "disable_tqdm": True,
    }
    settings.update(overrides)
    if seq2seq:
        settings.setdefault("predict_with_generate", True)
        settings.setdefault("generation_max_length", 12)  # the Trainer's own generate(): no max_length default warning
        return Seq2SeqTrainingArguments(**settings)
    return TrainingArguments(**settings)


def trainer(
    tmp: Path,
    arch: str,
    *,
    model: Any = None,
    callbacks: list[Any] | None = None,
    eval_dataset: Any = None,
    tokenizer: PreTrainedTokenizerBase | None = None,
    **overrides: Any,
) -> Trainer:
    """A Trainer (Seq2SeqTrainer with predict_with_generate for t5) on the shipped sentences, evaluated on them too
    unless `eval_dataset` is given."""
    tokenizer = tokenizer or tiny_tokenizer()
    model = model if model is not None else tiny_model(arch)
    seq2seq = arch == "t5"
    data = seq2seq_examples(tokenizer) if seq2seq else decoder_examples(tokenizer)
    collator = (
        DataCollatorForSeq2Seq(tokenizer, model=model)
        if seq2seq
        else DataCollatorForLanguageModeling(tokenizer, mlm=False)
    )
    cls = Seq2SeqTrainer if seq2seq else Trainer
    built = cls(
        model=model,
        args=arguments(tmp, seq2seq=seq2seq, **overrides),
        train_dataset=data,
        eval_dataset=data if eval_dataset is None else eval_dataset,
        data_collator=collator,
        processing_class=tokenizer,
        callbacks=callbacks,
    )
    built.remove_callback(PrinterCallback)
    return built


def private_copy(model: Any) -> Any:
    """Fixture models are shared between tests: train a copy."""
    return copy.deepcopy(model)
