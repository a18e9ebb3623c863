"""What the recorder reads from a training run, apart from the callback itself: the run's identity (its recipe),
RNG streams saved and restored around a recording, the evaluated examples from the evaluation dataloader, the latest
logged loss, and the figures a recording logs. Unlike `recorder.py` it does not import transformers, so fine-tuning
and scripts can use `preserved_rng` without it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import random
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pytest_genguard.hf.fingerprint import model_dtype
from pytest_genguard.hf.tokenizer_hash import legacy_tokenizer_hash
from pytest_genguard.hf.weights_hash import weights_hash

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase, TrainingArguments

    from pytest_genguard.core.trace import GenerationTrace

__all__ = [
    "TRAINING_ARGUMENTS",
    "eval_rows",
    "latest_loss",
    "metric_prefix",
    "preserved_generators",
    "preserved_rng",
    "recording_figures",
    "training_identity",
]


# ---------------------------------------------------------------------------------------------------- identity

# The TrainingArguments that say how a run trains, and that a user sets: optimizer internals (optim, adam_*,
# max_grad_norm) are left out because their defaults differ between transformers versions, which would make every
# history stale on an upgrade (a change there still shows, as a regression).
TRAINING_ARGUMENTS = (
    "learning_rate",
    "max_steps",
    "num_train_epochs",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "seed",
    "lr_scheduler_type",
    "warmup_steps",
    "weight_decay",
)


def training_identity(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, args: TrainingArguments) -> str:
    """What a training run starts from and how it trains: the initial weights and dtype, the tokenizer and the
    `TRAINING_ARGUMENTS`. A history's checkpoints carry it as their model's recipe: the weights a checkpoint
    records differ on every CPU whose kernels round otherwise (training amplifies it), so they cannot say whether
    two histories come from the same run; this can."""
    parts = {
        "weights": weights_hash(model),
        "dtype": model_dtype(model),
        "tokenizer": legacy_tokenizer_hash(tokenizer),  # version 1: recipes recorded before version 2 hold
        "arguments": {name: str(getattr(args, name, None)) for name in TRAINING_ARGUMENTS},
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


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


@contextlib.contextmanager
def preserved_generators(loader: Any) -> Iterator[None]:
    """A DataLoader's own generators (its `generator`, its sampler's, its batch sampler's sampler's) are not the
    global streams `preserved_rng` restores; iterating the loader draws from them (workers' base seed, a sampler)."""
    import torch

    owners = [
        loader,
        getattr(loader, "sampler", None),
        getattr(getattr(loader, "batch_sampler", None), "sampler", None),
    ]
    generators = {id(g): g for o in owners if isinstance(g := getattr(o, "generator", None), torch.Generator)}
    states = {key: g.get_state() for key, g in generators.items()}
    try:
        yield
    finally:
        for key, g in generators.items():
            g.set_state(states[key])


def _as_rows(value: Any, what: str) -> list[list[int]]:
    rows = value.tolist() if hasattr(value, "tolist") else value
    if not isinstance(rows, list) or not all(isinstance(r, list) for r in rows):
        raise ValueError(
            f"GenerationRecorder(eval_examples=...): the evaluation batch's {what!r} is not a 2-d batch of token ids "
            f"(found {type(value).__name__}); the data collator must return padded tensors or lists of lists."
        )
    return [[int(t) for t in r] for r in rows]


def eval_rows(
    dataloader: Any, n: int, *, encoder_decoder: bool, prompt_tokens: int, pad_token_id: int | None
) -> list[list[int]]:
    """The token ids of the first `n` examples `dataloader` yields, padding removed (by the batch's attention mask,
    else by `pad_token_id`): all of them for an encoder-decoder model (its encoder input), the first `prompt_tokens`
    for a decoder-only one (a prefix of the example to continue). Fewer when the data has fewer.

    An accelerate-prepared loader is read through its `base_dataloader`: the plain DataLoader underneath, whose
    iteration involves no collective operation (only the main process records) and no `GradientState` bookkeeping
    (an iteration stopped early would otherwise leave the loader registered as the active one during training).
    """
    loader = getattr(dataloader, "base_dataloader", dataloader)
    rows: list[list[int]] = []
    if n <= 0:
        return rows
    with preserved_generators(loader):
        for batch in loader:
            if not isinstance(batch, Mapping) or "input_ids" not in batch:
                found = sorted(batch) if isinstance(batch, Mapping) else type(batch).__name__
                raise ValueError(
                    "GenerationRecorder(eval_examples=...): the evaluation batches have no 'input_ids' (found "
                    f"{found}); record text models whose collator returns input_ids, or use eval_examples=0 and "
                    "probe prompts."
                )
            ids = _as_rows(batch["input_ids"], "input_ids")
            mask = _as_rows(batch["attention_mask"], "attention_mask") if "attention_mask" in batch else None
            for i, row in enumerate(ids):
                if mask is not None:
                    kept = [t for t, m in zip(row, mask[i], strict=True) if m]
                else:
                    kept = [t for t in row if t != pad_token_id]
                if not kept:
                    raise ValueError(
                        f"GenerationRecorder(eval_examples={n}): evaluation example {len(rows)} has no token once "
                        "padding is removed, so there is nothing to generate from; drop empty examples from the "
                        "evaluation data."
                    )
                rows.append(kept if encoder_decoder else kept[:prompt_tokens])
                if len(rows) == n:
                    return rows
    return rows


def recording_figures(trace: GenerationTrace, looping_prompts: int) -> dict[str, float]:
    """The numbers a recording adds to the Trainer's logs: the smallest top-1/top-2 margin (how close decoding came
    to a tie; left out when no step has two candidates), the share of prompts that ended with EOS, the share that
    loop (the repetition rule of `assert_no_repetition`) and the mean number of generated tokens."""
    n = max(1, len(trace.prompts))
    figures = {
        "eos_rate": sum(p.finish_reason == "eos" for p in trace.prompts) / n,
        "repetition": looping_prompts / n,
        "new_tokens": sum(len(p.steps) for p in trace.prompts) / n,
    }
    if math.isfinite(trace.min_margin):
        figures["min_margin"] = trace.min_margin
    return figures


def metric_prefix(metrics: Mapping[str, Any] | None, default: str) -> str:
    """The prefix the Trainer gave this evaluation's metrics ("eval_", "eval_<dataset>_", "test_"): every call of
    evaluate()/predict() logs "<prefix>runtime"."""
    for key in metrics or {}:
        if isinstance(key, str) and key.endswith("_runtime"):
            return key[: -len("runtime")]
    return default
