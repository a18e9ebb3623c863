"""Shared pieces of the invariant tests: hand-made steps, and the deliberately broken models and processors that the
negative controls use (each names the real bug it stands for)."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass
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


class NegativeControlDefect(RuntimeError):
    """A deliberate bug that changed nothing: the negative control tested nothing (a test defect, not a pass).

    Not an AssertionError, so no `pytest.raises(AssertionError)` around the check can swallow it."""


@dataclass
class Break:
    """A deliberate bug attached to a model copy, counting the forwards it really changed. Each break reaches into
    transformers (forward keyword names, cache layers, masks, position ids), and those move between releases: 5.24
    renamed the forward's `past_key_values` to `cache`, and a break written against the old name silently did nothing.
    """

    name: str
    applied: int = 0

    def hit(self) -> None:
        self.applied += 1

    def require_applied(self) -> None:
        if self.applied == 0:
            import transformers

            raise NegativeControlDefect(
                f"negative control {self.name!r} changed nothing on transformers {transformers.__version__}: its hook "
                "no longer reaches what it breaks (a renamed forward argument, cache layout or generation input?). "
                "Fix the break in tests/support/invariant_support.py so it applies on every supported release."
            )


Attach = Callable[[Any, Break], None]


def forward_kwarg(kwargs: dict[str, Any], *names: str) -> Any:
    """The first of `names` the forward was given (releases rename forward arguments: `past_key_values` -> `cache`)."""
    for name in names:
        if kwargs.get(name) is not None:
            return kwargs[name]
    return None


@contextlib.contextmanager
def broken(model: Any, attach: Attach) -> Iterator[Any]:
    """A private copy of `model` with `attach(copy, break)` applied (shared fine-tuned models stay untouched). On
    leaving, the break must have changed at least one forward, else `NegativeControlDefect`, whatever the check did."""
    clone = copy.deepcopy(model)
    bug = Break(getattr(attach, "__name__", repr(attach)))
    attach(clone, bug)
    try:
        yield clone
    finally:
        bug.require_applied()


def with_break(model: Any, attach: Attach, check: Callable[[Any], object]) -> None:
    """Run `check` on a broken copy of `model` (see `broken`), its frames hidden from a failure's traceback."""
    __tracebackhide__ = True
    with broken(model, attach) as clone:
        check(clone)


def dropout_in_eval(model: Any, bug: Break) -> None:
    """Dropout that stays on after model.eval(): a module applying F.dropout(training=True) to the final hidden
    state (what a custom layer that ignores `self.training` does)."""
    import torch

    def hook(mod: Any, args: Any, out: Any) -> Any:
        bug.hit()
        return torch.nn.functional.dropout(out, 0.1, training=True)

    final_norm = model.transformer.ln_f if hasattr(model, "transformer") else model.model.norm
    final_norm.register_forward_hook(hook)


def attention_mask_ignored(model: Any, bug: Break) -> None:
    """Padded tokens are attended: the attention mask is replaced by ones before every forward (a model that drops
    the mask it is given)."""
    import torch

    def hook(mod: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        mask = kwargs.get("attention_mask")
        if mask is not None and bool((mask == 0).any()):
            kwargs["attention_mask"] = torch.ones_like(mask)
            bug.hit()
        return args, kwargs

    model.register_forward_pre_hook(hook, with_kwargs=True)


def cache_forgets_first_position(model: Any, bug: Break) -> None:
    """A KV cache that loses what it stored for the first position (its values are zeroed whenever it is reused)."""

    def hook(mod: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        cache = forward_kwarg(kwargs, "cache", "past_key_values")  # `cache` since transformers 5.24
        if cache is not None and cache.get_seq_length() > 0:
            for layer in cache.layers:
                layer.values[:, :, 0] = 0
            bug.hit()
        return args, kwargs

    model.register_forward_pre_hook(hook, with_kwargs=True)


def decode_positions_off_by_one(model: Any, bug: Break) -> None:
    """One-token decode steps get position ids one too high (a RoPE/position offset bug of incremental decoding);
    multi-token prefills are right."""

    def hook(mod: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        if kwargs["input_ids"].shape[1] == 1 and kwargs.get("position_ids") is not None:
            kwargs["position_ids"] = kwargs["position_ids"] + 1
            bug.hit()
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
