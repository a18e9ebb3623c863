"""A PEFT model's adapters as part of its identity (`ModelFingerprint.adapters`): which are loaded, which is active,
their configuration (rank, alpha, target modules) and weights, whether they are merged or disabled.

The weights hash alone missed the adapter switches that change decoding without changing a weight: inside
``disable_adapter()`` or after ``set_adapter()`` to another loaded adapter the hash was the same and the decoding
differed, a false regression. peft is imported only for a model that has adapters (``peft_config``).
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from pytest_genguard.core.jsontext import JSONScalar
from pytest_genguard.hf.decoding_settings import readable_setting

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = ["adapter_identity"]

# The LoRA (and similar) configuration fields that change what an adapter computes.
_CONFIG_KEYS = (
    "peft_type",
    "r",
    "lora_alpha",
    "target_modules",
    "use_rslora",
    "use_dora",
    "bias",
    "modules_to_save",
    "fan_in_fan_out",
    "layers_to_transform",
    "rank_pattern",
    "alpha_pattern",
)


def _setting(value: Any) -> JSONScalar:
    if isinstance(value, (set, frozenset)):
        value = sorted(value)
    value = getattr(value, "value", value)  # an enum (PeftType.LORA) as its value
    return readable_setting(value)


def _weights(state: dict[str, Any], name: str) -> str:
    """sha256 of the adapter's own tensors (names with ``.NAME.`` in them, as PEFT names them), in name order."""
    import torch

    digest = hashlib.sha256()
    marker = f".{name}."
    for key in sorted(k for k in state if marker in k or k.endswith(f".{name}")):
        tensor = state[key].detach().to("cpu").contiguous()
        digest.update(f"{key}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy())
    return digest.hexdigest()


def adapter_identity(model: PreTrainedModel) -> dict[str, JSONScalar] | None:
    """The adapters' identity, flat (see `pytest_genguard.core.adapters`); None for a model without adapters."""
    configs = getattr(model, "peft_config", None)
    if not isinstance(configs, dict) or not configs:
        return None
    from peft.tuners.tuners_utils import BaseTunerLayer  # only for a model that has adapters

    layers = [m for m in model.modules() if isinstance(m, BaseTunerLayer)]
    active = getattr(model, "active_adapters", None)
    active_names = [active] if isinstance(active, str) else list(active or [])
    identity: dict[str, JSONScalar] = {
        "loaded": ",".join(sorted(configs)),
        "active": ",".join(active_names),
        "disabled": any(bool(layer.disable_adapters) for layer in layers),
        "merged": ",".join(sorted({n for layer in layers for n in layer.merged_adapters})),
    }
    state = model.state_dict(keep_vars=True)
    for name, config in sorted(configs.items()):
        fields = config.to_dict()
        for key in _CONFIG_KEYS:
            value = fields.get(key)
            if value is not None and value != {} and value != []:
                identity[f"{name}.{key}"] = _setting(value)
        identity[f"{name}.weights"] = _weights(state, name)
    return identity
