"""genguard's own reference conversions of a model: a bf16 and an fp16 cast, round-to-nearest int8 per output channel
and int4 in groups of 32 (weight-only, symmetric, the output head kept, as the usual weight-only quantizers do). What
they cost along a trace's paths is the model's calibration (`pytest_genguard.hf.fidelity.calibrate`), the scale of the
fidelity presets: what a correct int8 costs depends on the model (3.2e-3 KLD on SmolLM2-135M, under 2e-4 on the tiny
llama), so no fixed number per precision can be right for both. Measured: this int8 gives the very figures of
optimum-quanto's int8 on SmolLM2-135M, and torchao's int8 weight-only costs 1.13x it (docs/fidelity.md).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

from pytest_genguard.core.budget import CALIBRATIONS
from pytest_genguard.hf.kv_cache_copies import KV_PREFIX, kv_cache_copy

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel

__all__ = ["INT4_GROUP", "reference_copy", "round_to_nearest"]

INT4_GROUP = 32


def round_to_nearest(weight: torch.Tensor, bits: int, group: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric round-to-nearest: (integer codes, scales), per output channel or per `group` inputs."""
    top = 2 ** (bits - 1) - 1
    shaped = weight if group is None else weight.reshape(weight.shape[0], -1, group)
    scale = shaped.abs().amax(dim=-1, keepdim=True).clamp(min=1e-12) / top
    codes = (shaped / scale).round().clamp(-top - 1, top)
    return codes, scale


def reference_copy(model: PreTrainedModel, precision: str) -> PreTrainedModel:
    """genguard's reference conversion of `model` to `precision` ("bf16", "fp16", "int8", "int4"; or a KV cache's,
    "kv-f16" ...: `hf.kv_cache_copies`): a new model."""
    import torch

    if precision not in CALIBRATIONS:
        raise ValueError(f"reference_copy: unknown precision {precision!r}; known: {', '.join(CALIBRATIONS)}")
    if precision.startswith(KV_PREFIX):
        return kv_cache_copy(model, precision.removeprefix(KV_PREFIX))
    out = copy.deepcopy(model)
    if precision in ("bf16", "fp16"):
        return out.to(torch.bfloat16 if precision == "bf16" else torch.float16)
    bits, group = (8, None) if precision == "int8" else (4, INT4_GROUP)
    head = out.get_output_embeddings()
    with torch.no_grad():
        for module in out.modules():
            if not isinstance(module, torch.nn.Linear) or module is head:
                continue
            weight = module.weight
            size = weight.shape[-1]
            use = group if group is not None and size % group == 0 else None
            codes, scale = round_to_nearest(weight.float(), bits, use)
            weight.copy_((codes * scale).reshape(weight.shape).to(weight.dtype))
    return out
