"""Model and tokenizer fingerprints: what lets a snapshot tell "the model changed" from "the model regressed".

This module holds the model's fingerprint: its architecture config in one spelling across transformers versions
(`architecture_config`, `config_hash`) and `model_fingerprint()`, which adds the weights hash
(`pytest_genguard.hf.weights_hash`). The tokenizer's is `pytest_genguard.hf.tokenizer_hash`; `tokenizer_fingerprint`
and `forget_weights` are importable from here too, where the documentation has always named them.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_genguard.core.jsontext import JSONScalar
from pytest_genguard.core.trace import ModelFingerprint
from pytest_genguard.hf.adapters import adapter_identity
from pytest_genguard.hf.tokenizer_hash import tokenizer_fingerprint
from pytest_genguard.hf.weights_hash import (
    files_weights_hash,
    forget_weights,
    has_parameters,
    parameter_count,
    weights_folder,
    weights_hash,
)

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = [
    "architecture_config",
    "config_hash",
    "forget_weights",
    "model_dtype",
    "model_fingerprint",
    "tokenizer_fingerprint",
]


# Config keys that change without the model changing: bookkeeping, the Trainer's use_cache write, dtype (recorded on
# its own) and the attention implementation (an environment field, not a property of the weights).
_VOLATILE_CONFIG_KEYS = frozenset(
    {
        "transformers_version",
        "_name_or_path",
        "name_or_path",
        "use_cache",
        "torch_dtype",
        "dtype",
        "_attn_implementation",
        "_attn_implementation_autoset",
        "attn_implementation",
        "_commit_hash",
        "architectures",
        "genguard_recipe",  # a fingerprint field of its own
    }
)


# Not the architecture: generation defaults that transformers 4.x kept in the config (5.x moved them to the
# GenerationConfig; the decoding settings a trace records are its own field) and bookkeeping flags. Keys that a
# version adds or drops otherwise need no list: a key on one side only never counts (see compare's stale rule).
_NOT_ARCHITECTURE = frozenset(
    {
        "bad_words_ids",
        "begin_suppress_tokens",
        "diversity_penalty",
        "do_sample",
        "early_stopping",
        "encoder_no_repeat_ngram_size",
        "exponential_decay_length_penalty",
        "forced_bos_token_id",
        "forced_eos_token_id",
        "length_penalty",
        "max_length",
        "min_length",
        "no_repeat_ngram_size",
        "num_beam_groups",
        "num_beams",
        "num_return_sequences",
        "output_attentions",
        "output_hidden_states",
        "output_scores",
        "remove_invalid_values",
        "repetition_penalty",
        "return_dict",
        "return_dict_in_generate",
        "suppress_tokens",
        "temperature",
        "top_k",
        "top_p",
        "typical_p",
        "chunk_size_feed_forward",
        "finetuning_task",
        "id2label",
        "label2id",
        "prefix",
        "problem_type",
        "task_specific_params",
        "tf_legacy_loss",
        "tokenizer_class",
        "torchscript",
        "use_bfloat16",
    }
)

# transformers 5 folded these 4.x keys into ``rope_parameters``; 4.x configs are folded the same way.
_ROPE_KEYS = ("rope_theta", "rope_scaling", "partial_rotary_factor", "rotary_pct", "rotary_emb_base")
_LOCAL_ROPE = "rope_local_base_freq"
"""4.x Gemma 3's rope base of its sliding-window layers (``rope_theta`` and ``rope_scaling`` are its global layers'):
5.x keeps one set of rope parameters per layer type, ``rope_parameters.sliding_attention`` and ``.full_attention``."""


def _fold_rope(config: dict[str, Any]) -> None:
    """Rewrite 4.x rope keys as 5.x's ``rope_parameters`` (theta, type, scaling, partial factor), in place; 4.x
    Gemma 3's per layer type, as 5.x does."""
    if isinstance(config.get("rope_parameters"), dict):
        for key in (*_ROPE_KEYS, _LOCAL_ROPE):
            config.pop(key, None)  # 5.x: the same values are inside rope_parameters
        return
    if "rope_theta" not in config and "rotary_emb_base" not in config:
        return  # no rotary embeddings (gpt2, t5)
    local = config.pop(_LOCAL_ROPE, None)
    scaling = config.get("rope_scaling")
    rope: dict[str, Any] = dict(scaling) if isinstance(scaling, dict) else {}
    if "type" in rope:
        rope.setdefault("rope_type", rope.pop("type"))
    rope.setdefault("rope_type", "default")
    theta = config.get("rope_theta")
    rope["rope_theta"] = config.get("rotary_emb_base") if theta is None else theta
    partial = config.get("partial_rotary_factor")
    partial = config.get("rotary_pct") if partial is None else partial
    if partial is not None:
        rope["partial_rotary_factor"] = partial
    for key in _ROPE_KEYS:
        config.pop(key, None)
    if local is None:
        config["rope_parameters"] = rope
    else:  # 5.x: the global layers take rope_theta and rope_scaling, the sliding ones their own base, unscaled
        config["rope_parameters"] = {
            "full_attention": rope,
            "sliding_attention": {"rope_type": "default", "rope_theta": local},
        }


def _canonical(value: Any) -> Any:
    """One spelling per value: integral floats as ints (4.x wrote ``rope_theta: 10000``, 5.x ``10000.0``)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _flatten(config: dict[str, Any], prefix: str, out: dict[str, JSONScalar], *, fold: bool = True) -> None:
    config = {k: v for k, v in config.items() if k not in _VOLATILE_CONFIG_KEYS and k not in _NOT_ARCHITECTURE}
    if fold:  # a config or sub-config (text_config, ...), not the rope parameters themselves
        _fold_rope(config)
    for key, value in sorted(config.items()):
        name = f"{prefix}{key}"
        if value is None:
            continue  # unset: the same as absent (5.x fills in some defaults that 4.x left as None)
        if isinstance(value, dict):
            # rope parameters are never a config, nor are those of a layer type inside them (5.x Gemma 3's)
            _flatten(value, f"{name}.", out, fold=fold and key not in ("rope_parameters", "rope_scaling"))
        elif isinstance(value, (list, tuple)):
            out[name] = json.dumps([_canonical(v) for v in value], sort_keys=True, default=str)
        elif isinstance(value, (str, int, float, bool)):
            out[name] = _canonical(value)
        else:
            out[name] = str(value)


def architecture_config(raw: dict[str, Any]) -> dict[str, JSONScalar]:
    """The architecture part of a ``config.to_dict()``, flat (``rope_parameters.rope_theta``) and in one spelling
    across transformers versions: no bookkeeping, no generation defaults, no unset values, rope keys as in 5.x."""
    out: dict[str, JSONScalar] = {}
    _flatten(dict(raw), "", out)
    return out


def config_hash(model: PreTrainedModel) -> str:
    """sha256 of `architecture_config` (the same on transformers 4.57 and 5.x for the same model)."""
    return _config_digest(architecture_config(model.config.to_dict()))


def _config_digest(config: dict[str, JSONScalar]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


def model_dtype(model: PreTrainedModel) -> str:
    """The floating dtype of the parameters, as 'float32' / 'bfloat16' / 'float16' (for a model without parameters:
    its config's dtype, float32 when unset)."""
    if not has_parameters(model):
        value = getattr(model.config, "dtype", None) or getattr(model.config, "torch_dtype", None)
        return str(value).removeprefix("torch.") if value else "float32"
    for p in model.parameters():
        if p.is_floating_point():
            return str(p.dtype).removeprefix("torch.")
    return "float32"


def model_fingerprint(model: PreTrainedModel) -> ModelFingerprint:
    """Fingerprint of the model's config and weights; a model without torch parameters (optimum's ONNX Runtime /
    OpenVINO classes) by its weight files (`files_weights_hash`, 0 parameters counted)."""
    config = architecture_config(model.config.to_dict())
    folder = None if has_parameters(model) else weights_folder(model)
    if not has_parameters(model) and folder is None:
        raise ValueError(
            f"genguard: the model ({type(model).__name__}) has no parameters and no folder of weight files "
            "(model_save_dir, or config.name_or_path) to fingerprint it by; load it from a folder"
        )
    return ModelFingerprint(
        model_type=str(getattr(model.config, "model_type", type(model).__name__)),
        config_hash=_config_digest(config),
        weights_hash=weights_hash(model) if folder is None else files_weights_hash(folder),
        num_parameters=parameter_count(model) if folder is None else 0,
        dtype=model_dtype(model),
        recipe=_recipe(model),
        config=config,
        adapters=adapter_identity(model),
        name_or_path=_name_or_path(model.config),
        revision=_optional_text(getattr(model.config, "_commit_hash", None)),
    )


def _optional_text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _name_or_path(config: Any) -> str | None:
    """``config._name_or_path`` as given for a hub id; a local folder by its name only (its full path differs from
    machine to machine, and would make every re-recorded snapshot differ by it). None when empty."""
    name = _optional_text(getattr(config, "_name_or_path", None))
    if name is None:
        return None
    path = Path(name)
    return (path.name or name) if path.is_dir() else name


def _recipe(model: PreTrainedModel) -> str | None:
    recipe = getattr(model.config, "genguard_recipe", None)
    return recipe if isinstance(recipe, str) else None
