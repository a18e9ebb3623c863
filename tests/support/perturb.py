"""Small, named changes to a model's numbers, for measuring what the comparison rule still catches (the detection
floor: docs/portability.md, "What it catches") and for the tests that hold each row of that table.

Each kind is a context manager over a model: the change is in force inside it and undone after, so one model serves
the baseline and every perturbed run."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

import pytest_genguard as gg

Perturbation = Callable[[Any, float], contextlib.AbstractContextManager[None]]


@contextlib.contextmanager
def _output_hook(model: Any, change: Callable[[torch.Tensor], torch.Tensor]) -> Iterator[None]:
    handle = model.get_output_embeddings().register_forward_hook(lambda _m, _i, out: change(out))
    try:
        yield
    finally:
        handle.remove()


def logit_scale(model: Any, delta: float) -> contextlib.AbstractContextManager[None]:
    """Every logit times (1 + delta): a temperature-like drift of the whole head."""
    return _output_hook(model, lambda out: out * (1 + delta))


def logit_bias(model: Any, bias: float, token_id: int = 17) -> contextlib.AbstractContextManager[None]:
    """`bias` added to one token's logit (id 17, '.': in the top-k of most steps of the probe prompts)."""

    def change(out: torch.Tensor) -> torch.Tensor:
        out = out.clone()
        out[..., token_id] += bias
        return out

    return _output_hook(model, change)


@contextlib.contextmanager
def head_noise(model: Any, relative: float, seed: int = 0) -> Iterator[None]:
    """Each weight of the output head times (1 + relative * N(0, 1)), from a fixed seed: a lossy conversion."""
    weight = model.get_output_embeddings().weight
    saved = weight.detach().clone()
    noise = torch.randn(weight.shape, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        weight.mul_(1 + relative * noise)
    try:
        yield
    finally:
        with torch.no_grad():
            weight.copy_(saved)


def _final_norm(model: Any) -> tuple[Any, str]:
    for path, attr in (
        ("transformer.ln_f", "eps"),
        ("model.norm", "variance_epsilon"),
        ("decoder.final_layer_norm", "variance_epsilon"),
    ):
        module = model
        try:
            for part in path.split("."):
                module = getattr(module, part)
        except AttributeError:
            continue
        return module, attr
    raise ValueError(f"no final norm known for {type(model).__name__}")


@contextlib.contextmanager
def norm_eps(model: Any, added: float) -> Iterator[None]:
    """`added` added to the final norm's epsilon (a converter that writes 1e-5 for 1e-6, say)."""
    module, attr = _final_norm(model)
    saved = getattr(module, attr)
    setattr(module, attr, saved + added)
    try:
        yield
    finally:
        setattr(module, attr, saved)


KINDS: dict[str, Perturbation] = {
    "logit scale drift": logit_scale,
    "logit bias on one token": logit_bias,
    "relative noise in the output head": head_noise,
    "final norm epsilon": norm_eps,
}


def pinned(arch: str, pins: Path, seed: int = 0) -> Any:
    """The pinned fine-tuned model of `arch` (default recipe at `seed`) from `pins`, in eval mode."""
    model = gg.finetune(arch, seed=seed, pin_dir=pins, pin="use").model
    return model.eval()
