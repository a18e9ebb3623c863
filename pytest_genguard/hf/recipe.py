"""What a fine-tuned tiny model is made from, its *recipe*: architecture, optimizer steps, seed, training texts, probe
prompts, learning rate and batch size (`Recipe`, the one definition `finetune()` and the `genguard_finetune` fixture
share), the training examples it makes, and the recipe's identity (`recipe_hash`: what a fine-tuned model's
fingerprint names, the same on every machine and library version).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from math import inf
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

from pytest_genguard.hf.cache import cache_key
from pytest_genguard.hf.tiny import ARCHS, config_arguments, finetune_texts, probe_prompts

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedTokenizerFast

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_LEARNING_RATES",
    "DEFAULT_STEPS",
    "Collator",
    "Examples",
    "Recipe",
    "RecipeArgs",
    "encoder_input",
    "examples_for",
    "recipe_hash",
    "recipe_inputs",
]

DEFAULT_STEPS: dict[str, int] = {"gpt2": 150, "llama": 100, "t5": 150}
"""Optimizer steps per arch that make the default models sharp: with them every arch ends every probe prompt with EOS,
smallest greedy top-1/top-2 margin measured 4.86 (gpt2), 7.60 (llama), 5.91 (t5) nats (tests/hf/test_finetune.py asserts
4.5)."""
DEFAULT_LEARNING_RATES: dict[str, float] = {"gpt2": 1e-2, "llama": 1e-2, "t5": 5e-3}
"""Per arch. t5 at 1e-2 is chaotic: the same recipe under the AVX2 and the scalar CPU kernels ended 2 nats apart in
its probes' logprobs; at 5e-3 it ends 0.02-0.13 apart, like gpt2 (0.015-0.07) and llama (< 0.002), which is what the
training tolerance (`compare.TRAINING`) is set from."""
RECIPE_INIT = "portable-1"
"""The initialisation `tiny_model` uses (part of every recipe: genguard's earlier, machine-dependent initialisation
made other weights from the same recipe)."""
DEFAULT_BATCH_SIZE = 8
LR_SCHEDULER = "linear"
RECORD_MAX_NEW_TOKENS = 24
RECORD_TOP_K = 5
TRAIN_THREADS = 1
HISTORY_POINTS = 4
"""The recorder records this many times during training (and not again at the end: the last step is recorded)."""


class RecipeArgs(TypedDict, total=False):
    """The recipe keywords of `finetune()` and of the `genguard_finetune` fixture (see `Recipe`)."""

    steps: int | None
    seed: int
    corpus: Sequence[str] | None
    prompts: Sequence[str] | None
    learning_rate: float | None
    batch_size: int


@dataclass(frozen=True)
class Recipe:
    """Everything the user chose that determines the fine-tuned weights (hashable: the fixture's memo key).

    Build it with `Recipe.of(arch, **args)`, which fills in the defaults (steps and learning rate per arch, the
    shipped texts and probes) and checks every value.
    """

    arch: str
    steps: int
    seed: int
    corpus: tuple[str, ...]
    prompts: tuple[str, ...]
    learning_rate: float
    batch_size: int

    @property
    def every_n_steps(self) -> int:
        return max(1, self.steps // HISTORY_POINTS)

    @classmethod
    def of(cls, arch: str | Recipe = "gpt2", **args: Unpack[RecipeArgs]) -> Recipe:
        """The recipe of `arch` with `args` (`RecipeArgs`); a `Recipe` is returned as it is (no args allowed)."""
        if isinstance(arch, Recipe):
            if args:
                raise TypeError(f"finetune(Recipe(...), {', '.join(args)}=...): put them in the Recipe")
            return arch
        unknown = set(args) - set(RecipeArgs.__annotations__)
        if unknown:
            accepted = ", ".join(RecipeArgs.__annotations__)
            raise TypeError(f"finetune(): unknown argument {sorted(unknown)[0]!r}; accepted: {accepted}")
        if arch not in ARCHS:
            raise ValueError(f"finetune(arch={arch!r}): unknown arch; valid archs are {', '.join(ARCHS)}")
        steps = args.get("steps")
        steps = DEFAULT_STEPS[arch] if steps is None else steps
        learning_rate = args.get("learning_rate")
        learning_rate = DEFAULT_LEARNING_RATES[arch] if learning_rate is None else learning_rate
        batch_size = args.get("batch_size", DEFAULT_BATCH_SIZE)
        seed = args.get("seed", 0)
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ValueError(f"finetune(steps={steps!r}): must be a positive number of optimizer steps.")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"finetune(batch_size={batch_size!r}): must be a positive integer.")
        if isinstance(seed, bool) or not isinstance(seed, int):  # int(2.5) would train (and cache) seed 2 silently
            raise ValueError(f"finetune(seed={seed!r}): must be an integer.")
        rate = learning_rate
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 < rate < inf:
            raise ValueError(f"finetune(learning_rate={learning_rate!r}): must be a finite number > 0.")
        corpus, prompts = args.get("corpus"), args.get("prompts")
        texts = _strings(corpus, "corpus") if corpus is not None else tuple(finetune_texts())
        probes = _strings(prompts, "prompts") if prompts is not None else tuple(probe_prompts())
        return cls(arch, steps, int(seed), texts, probes, float(learning_rate), batch_size)


def _strings(values: Sequence[str], name: str) -> tuple[str, ...]:
    items = (values,) if isinstance(values, str) else tuple(values)
    if not items or not all(isinstance(v, str) and v.strip() for v in items):
        raise ValueError(f"finetune({name}=...): pass a non-empty list of non-empty strings.")
    return items


# ---------------------------------------------------------------------------------------------------- data


def encoder_input(text: str, prompts: Sequence[str]) -> str:
    """T5's encoder input for a sentence: the longest probe prompt it starts with, else its first two words."""
    matches = [p for p in prompts if text.startswith(p) and len(p) < len(text)]
    if matches:
        return max(matches, key=len)
    return " ".join(text.split()[:2])


class Examples:
    """A map-style dataset of token-id examples (a `torch.utils.data.Dataset` by protocol)."""

    def __init__(self, items: list[dict[str, list[int]]]) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict[str, list[int]]:
        return self.items[index]


def examples_for(spec: Recipe, tokenizer: PreTrainedTokenizerFast) -> Examples:
    """EOS is appended to every target and is never masked: the model must learn to stop."""
    eos = str(tokenizer.eos_token)
    items: list[dict[str, list[int]]] = []
    for text in spec.corpus:
        if spec.arch == "t5":
            source = encoder_input(text, spec.prompts)
            target = text[len(source) :] if text.startswith(source) else text
            items.append({"input_ids": tokenizer(source)["input_ids"], "labels": tokenizer(target + eos)["input_ids"]})
        else:
            items.append({"input_ids": tokenizer(text + eos)["input_ids"]})
    return Examples(items)


class Collator:
    """Right-pads a batch; only padding is masked (-100) in the labels, so EOS stays a target."""

    def __init__(self, pad_id: int) -> None:
        self.pad_id = pad_id

    def __call__(self, batch: list[dict[str, list[int]]]) -> dict[str, torch.Tensor]:
        import torch  # (torch-side: only when training)

        def pad(rows: list[list[int]], value: int) -> torch.Tensor:
            out = torch.full((len(rows), max(len(r) for r in rows)), value, dtype=torch.long)
            for i, row in enumerate(rows):
                out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
            return out

        ids = [b["input_ids"] for b in batch]
        input_ids = pad(ids, self.pad_id)
        attention_mask = pad([[1] * len(r) for r in ids], 0)
        if "labels" in batch[0]:
            labels = pad([b["labels"] for b in batch], -100)
        else:
            labels = input_ids.masked_fill(attention_mask == 0, -100)
        return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


# ---------------------------------------------------------------------------------------------------- identity


def recipe_inputs(spec: Recipe) -> dict[str, Any]:
    """How the model is made, from our own inputs only, readable (it is written into every pin's manifest)."""
    # Line endings as genguard wrote them (LF): a git checkout with core.autocrlf=true must not change the recipe.
    shipped = resources.files("pytest_genguard").joinpath("data", "tokenizer.json").read_bytes().replace(b"\r\n", b"\n")
    return {
        "arch": spec.arch,
        "config": config_arguments(spec.arch),
        "init": RECIPE_INIT,
        "tokenizer_file": hashlib.sha256(shipped).hexdigest(),
        "corpus": hashlib.sha256(json.dumps(spec.corpus).encode()).hexdigest(),
        "prompts": list(spec.prompts),
        "training": [spec.steps, spec.learning_rate, spec.batch_size, LR_SCHEDULER, spec.every_n_steps],
        "record": [RECORD_MAX_NEW_TOKENS, RECORD_TOP_K, TRAIN_THREADS],
        "seed": spec.seed,
    }


def recipe_hash(spec: Recipe) -> str:
    """How the model was made, from our own inputs only: the model's identity in its fingerprint.

    Unlike the cache key it leaves out everything a library upgrade or another CPU changes (versions, the config's
    full dict, the Trainer's defaults, the kernel set), so the same recipe elsewhere is the same model, compared for
    drift rather than called stale.
    """
    return cache_key(recipe_inputs(spec))
