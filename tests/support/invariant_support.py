"""Shared pieces of the invariant tests: hand-made steps, and the deliberately broken models and processors that the
negative controls use (each names the real bug it stands for)."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any

import pytest
import trace_builder

from pytest_genguard.core import events
from pytest_genguard.core.trace import GenerationTrace, PromptTrace, Step

PROBES = ["the quick", "once upon a", "the train", "she reads"]
EOS = 2


def step(token_id: int, token: str, *, logprob: float = -0.1, best: float | None = None) -> Step:
    """A plausible greedy step: the chosen token is the raw top-1, its score the best score."""
    other = (token_id + 1) % 700 + 10
    return trace_builder.step([(token_id, logprob), (other, logprob - 3.0)], text=token, score=1.5, best=best)


def hand_trace(*paths: list[tuple[int, str]], finish: str = "length", **settings: Any) -> GenerationTrace:
    """A trace of hand-made greedy paths (one per prompt) with `settings` (max_new_tokens defaults to the length)."""
    prompts = []
    for i, path in enumerate(paths):
        steps = tuple(step(t, text) for t, text in path)
        prompts.append(PromptTrace(f"prompt {i}", (5, 6), steps, finish, "".join(text for _, text in path)))
    longest = max(len(p) for p in paths)
    return GenerationTrace(prompts=tuple(prompts), settings={"max_new_tokens": longest, "mode": "greedy", **settings})


@contextlib.contextmanager
def caught(match: str | None = None) -> Iterator[pytest.ExceptionInfo[AssertionError]]:
    """`pytest.raises(AssertionError)` for a negative control, with genguard events muted: an invariant failing on
    purpose is not a failed check of this run (tests/hf/test_invariant_messages.py checks the events themselves)."""
    with events.muted(), pytest.raises(AssertionError, match=match) as info:
        yield info


@contextlib.contextmanager
def broken(model: Any, attach: Any) -> Iterator[Any]:
    """A private copy of `model` with `attach(copy)` applied: shared fine-tuned models stay untouched."""
    clone = copy.deepcopy(model)
    attach(clone)
    yield clone


def dropout_in_eval(model: Any) -> None:
    """Dropout that stays on after model.eval(): a module applying F.dropout(training=True) to the final hidden
    state (what a custom layer that ignores `self.training` does)."""
    import torch

    final_norm = model.transformer.ln_f if hasattr(model, "transformer") else model.model.norm
    final_norm.register_forward_hook(lambda mod, args, out: torch.nn.functional.dropout(out, 0.1, training=True))


def attention_mask_ignored(model: Any) -> None:
    """Padded tokens are attended: the attention mask is replaced by ones before every forward (a model that drops
    the mask it is given)."""
    import torch

    def hook(mod: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        if kwargs.get("attention_mask") is not None:
            kwargs["attention_mask"] = torch.ones_like(kwargs["attention_mask"])
        return args, kwargs

    model.register_forward_pre_hook(hook, with_kwargs=True)


def cache_forgets_first_position(model: Any) -> None:
    """A KV cache that loses what it stored for the first position (its values are zeroed whenever it is reused)."""

    def hook(mod: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        cache = kwargs.get("past_key_values")
        if cache is not None and cache.get_seq_length() > 0:
            for layer in cache.layers:
                layer.values[:, :, 0] = 0
        return args, kwargs

    model.register_forward_pre_hook(hook, with_kwargs=True)


def decode_positions_off_by_one(model: Any) -> None:
    """One-token decode steps get position ids one too high (a RoPE/position offset bug of incremental decoding);
    multi-token prefills are right."""

    def hook(mod: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        if kwargs["input_ids"].shape[1] == 1 and kwargs.get("position_ids") is not None:
            kwargs["position_ids"] = kwargs["position_ids"] + 1
        return args, kwargs

    model.register_forward_pre_hook(hook, with_kwargs=True)


def noise_processor(scale: float) -> Any:
    """A sampler hiding in a greedy path: a logits processor adding Gumbel noise from the global torch RNG."""
    import torch
    from transformers import LogitsProcessor, LogitsProcessorList

    class GumbelNoise(LogitsProcessor):
        def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
            uniform = torch.rand_like(scores).clamp(1e-9, 1 - 1e-9)
            noisy: torch.FloatTensor = scores - scale * torch.log(-torch.log(uniform))
            return noisy

    return LogitsProcessorList([GumbelNoise()])
