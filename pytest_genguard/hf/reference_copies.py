"""genguard's own reference conversions of a model: a bf16 and an fp16 cast, round-to-nearest int8 per output channel
and int4 in groups of 32 (weight-only, symmetric, the output head kept, as the usual weight-only quantizers do). What
they cost along a trace's paths is the model's calibration (`pytest_genguard.hf.fidelity.calibrate`), the scale of the
fidelity presets: what a correct int8 costs depends on the model (3.2e-3 KLD on SmolLM2-135M, under 2e-4 on the tiny
llama), so no fixed number per precision can be right for both. Measured: this int8 gives the very figures of
optimum-quanto's int8 on SmolLM2-135M, and torchao's int8 weight-only costs 1.13x it (docs/fidelity.md).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from pytest_genguard.core.budget import CALIBRATIONS
from pytest_genguard.hf import offload, tensor_parallel
from pytest_genguard.hf.kv_cache_copies import KV_PREFIX, as_kv_cache

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
    "kv-f16" ...: `hf.kv_cache_copies`): a new model. A
    model accelerate dispatched with offloaded weights is copied with its offloaded weights converted as its hooks
    bring them in (`hf.offload.converted_copy`: read where they are, never copied whole); the same conversion, so the
    same figures, as the model in memory."""
    import torch

    if precision not in CALIBRATIONS:
        raise ValueError(f"reference_copy: unknown precision {precision!r}; known: {', '.join(CALIBRATIONS)}")
    ranks = tensor_parallel.world_size(model)
    if ranks is not None:  # refused on every rank alike, before any rank starts a copy the others would wait for
        raise ValueError(
            f"genguard's {precision} reference copy of a model split over {ranks} ranks (tensor parallelism) cannot be "
            "made: torch's DTensor weights do not deep-copy (\"Attempted to call copy_() on an invalid python "
            'storage"). A calibration is of the weights: calibrate() the same checkpoint loaded in one process and '
            "judge the tensor-parallel model against that trace (fidelity() without reference_model= reads it)."
        )
    kv_cache = precision.startswith(KV_PREFIX)  # the weights kept, in float32: the attention computed as llama.cpp's
    cast = torch.float32 if kv_cache else {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    head: list[Any] = []  # the copy's output layer, known once the copy exists

    def convert(module: Any, name: str, tensor: torch.Tensor) -> torch.Tensor:
        if cast is not None:
            return tensor.to(cast) if tensor.is_floating_point() else tensor
        if name != "weight" or not isinstance(module, torch.nn.Linear) or module is head[0]:
            return tensor
        return _rounded(tensor, precision)

    offloaded = bool(offload.offloaded(model, model.state_dict(keep_vars=True)))
    out = offload.converted_copy(model, convert) if offloaded else copy.deepcopy(model)
    head.append(out.get_output_embeddings())
    if cast is not None:
        # transformers' to() refuses a model with offloaded modules; torch's casts its meta weights too, and
        # accelerate's hooks cast what they bring in to the parameter's dtype.
        out = torch.nn.Module.to(out, cast) if offloaded else out.to(cast)
        return as_kv_cache(out, precision.removeprefix(KV_PREFIX)) if kv_cache else out
    with torch.no_grad():
        for module in out.modules():
            if isinstance(module, torch.nn.Linear) and module is not head[0] and not module.weight.is_meta:
                module.weight.copy_(_rounded(module.weight, precision))
    return out


def _rounded(weight: torch.Tensor, precision: str) -> torch.Tensor:
    """`weight` rounded to nearest as `precision` ("int8": per output channel; "int4": in groups of `INT4_GROUP`
    where the rows divide, else per channel), back in its dtype."""
    bits, group = (8, None) if precision == "int8" else (4, INT4_GROUP)
    use = group if group is not None and weight.shape[-1] % group == 0 else None
    codes, scale = round_to_nearest(weight.float(), bits, use)
    return (codes * scale).reshape(weight.shape).to(weight.dtype)
