"""The weights part of a model's fingerprint: a hash of every parameter and buffer as stored (plain, quantized,
tensor-subclass weights), computed once per model state (`pytest_genguard.hf.weights_watch`); a model known by its
files (optimum's ONNX Runtime / OpenVINO classes) by its weight files; the parameter count."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_genguard.core.files import file_sha256
from pytest_genguard.hf import offload, tensor_parallel, weights_watch

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel

__all__ = [
    "files_weights_hash",
    "forget_weights",
    "has_parameters",
    "parameter_count",
    "state_dict_sha256",
    "weight_files",
    "weights_folder",
    "weights_hash",
]


def weights_hash(model: PreTrainedModel, *, cached: bool = True) -> str:
    """sha256 over every parameter and buffer as stored (name, dtype, shape, bytes); device independent.

    Hashing every weight costs as much as a decoding step of a large model, so the digest is computed once per model
    state and reused (`pytest_genguard.hf.weights_watch`): while no weight changed, a call costs a walk over the state
    dict and no read of the weights. `cached=False` hashes every weight now (and refreshes the cache).
    """
    import torch

    state = model.state_dict(keep_vars=True)
    # accelerate's offloaded weights (meta parameters) are read from where its hooks hold them, one at a time; the
    # watch sees the tensors held in memory and the state of the files the others are read from.
    away = offload.offloaded(model, state)
    hashed: dict[str, Any] = {**state, **away}
    watched = {
        n: (away[n].held if n in away else t) for n, t in state.items() if n not in away or away[n].held is not None
    }
    files = offload.watch_key(away.values()) if away else ()
    # A tensor-parallel model's ranks watch their own shards, and agree whether all of them hit (`agreed` below).
    sharded = any(tensor_parallel.is_dtensor(t) for t in watched.values())
    if sharded:
        watched = tensor_parallel.local_shards(watched)
    # Only plain tensors can be watched: torch's quantized modules (`quantize_dynamic`) keep their weights packed and
    # write them into the state dict as a (weight, bias) tuple unpacked anew on every call, and a tensor subclass
    # (torchao's Int8Tensor) keeps its data in inner tensors the watch does not see: such models are hashed anew.
    plain = (torch.Tensor, torch.nn.Parameter)
    watchable = all(type(t) in plain and not t.is_quantized for t in watched.values())
    if cached and watchable and files is not None:
        digest = weights_watch.lookup(model, watched, files)
        if sharded and not tensor_parallel.agreed(state, digest is not None):
            digest = None  # another rank's shard changed: every rank hashes again (its all-gathers need them all)
        if digest is not None:
            return digest
    digest = state_dict_sha256(hashed)
    if watchable and files is not None:
        weights_watch.remember(model, watched, digest, files)
    else:
        weights_watch.forget(model)
    return digest


def forget_weights(model: PreTrainedModel) -> None:
    """Drop `model`'s cached weights hash: the next fingerprint hashes every weight again.

    Needed only after changing a few weights in a way torch does not track (in place through `.data` or a numpy view,
    away from the sampled elements: see `pytest_genguard.hf.weights_watch`).
    """
    weights_watch.forget(model)


def state_dict_sha256(state: Mapping[str, Any]) -> str:
    """The weights hash of a state dict: sha256 over its entries sorted by name, each as `name|dtype|shape|` and the
    tensor's bytes. Reads every weight (copying each tensor to the host in turn).

    Quantized models write more than plain tensors: a quantized tensor is hashed by its integers and quantization
    parameters, a tuple (a dynamically quantized Linear's packed ``(weight, bias)``) entry by entry as ``name.0``,
    ``name.1``, a tensor subclass (torchao's ``Int8Tensor``, which has no bytes of its own to view) by its class,
    its flattening context and its inner tensors (``__tensor_flatten__``: ``name.qdata``, ``name.scale``, ...),
    anything else (a ``None`` bias, the ``torch.qint8`` dtype) by its repr."""
    digest = hashlib.sha256()
    for name, value in sorted(state.items()):
        _hash_entry(digest, name, value)
    return digest.hexdigest()


def _hash_entry(digest: Any, name: str, value: Any) -> None:
    import torch

    if isinstance(value, offload.Offloaded):  # read from where accelerate's hook holds it, hashed as in memory
        value = value.read()
    if tensor_parallel.is_dtensor(value):  # a tensor-parallel shard: the whole weight, as in one process
        value = tensor_parallel.whole(value)
    if isinstance(value, (tuple, list)):
        for i, item in enumerate(value):
            _hash_entry(digest, f"{name}.{i}", item)
    elif not isinstance(value, torch.Tensor):
        digest.update(f"{name}|{value!r}|".encode())
    elif value.is_quantized:
        _hash_quantized(digest, name, value.detach().to("cpu"))
    elif type(value) not in (torch.Tensor, torch.nn.Parameter) and hasattr(value, "__tensor_flatten__"):
        inner, context = value.__tensor_flatten__()
        kind = f"{type(value).__module__}.{type(value).__qualname__}"
        digest.update(f"{name}|{kind}|{value.dtype}|{tuple(value.shape)}|{_context_text(context)}|".encode())
        for part in inner:
            _hash_entry(digest, f"{name}.{part}", getattr(value, part))
    else:
        t = value.detach().to("cpu").contiguous()
        digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        digest.update(_buffer(t))


def _context_text(context: Any) -> str:
    """A tensor subclass's flattening context (block size, dtype, flags) as text; an object's address is dropped
    (it differs from run to run, the value does not)."""
    return re.sub(r" at 0x[0-9a-fA-F]+", "", repr(context))


def _buffer(t: torch.Tensor) -> Any:
    """A tensor's bytes, read in place (no copy of every weight)."""
    import torch

    return t.contiguous().reshape(-1).view(torch.uint8).numpy()


def _hash_quantized(digest: Any, name: str, t: torch.Tensor) -> None:
    """A quantized tensor: its scheme, scale(s) and zero point(s), then its integers (`int_repr`)."""
    import torch

    scheme = t.qscheme()
    digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}|{scheme}|".encode())
    if scheme in (torch.per_tensor_affine, torch.per_tensor_symmetric):
        digest.update(f"{t.q_scale()!r}|{t.q_zero_point()}|".encode())
    else:
        digest.update(f"axis {t.q_per_channel_axis()}|".encode())
        digest.update(_buffer(t.q_per_channel_scales().to(torch.float64)))
        digest.update(_buffer(t.q_per_channel_zero_points().to(torch.int64)))
    digest.update(_buffer(t.int_repr()))


# What a model known by its files (optimum's ONNX Runtime / OpenVINO classes) computes with; not its config or
# tokenizer files, which the fingerprint's config and the tokenizer fingerprint cover.
_WEIGHT_SUFFIXES = (".onnx", ".onnx_data", ".data", ".bin", ".xml", ".safetensors", ".gguf")


def has_parameters(model: Any) -> bool:
    """Whether `model` holds torch parameters (optimum's ONNX Runtime / OpenVINO models do not)."""
    parameters = getattr(model, "parameters", None)
    return callable(parameters) and next(iter(parameters()), None) is not None


def weights_folder(model: Any) -> Path | None:
    """The folder of a parameterless model's weight files: `model_save_dir` (optimum), else `config.name_or_path`."""
    config = getattr(model, "config", None)
    for candidate in (getattr(model, "model_save_dir", None), getattr(config, "name_or_path", None)):
        if candidate and Path(candidate).is_dir() and weight_files(Path(candidate)):
            return Path(candidate)
    return None


def weight_files(folder: Path) -> list[Path]:
    """The weight files in `folder` (not recursive), sorted by name."""
    return sorted(p for p in folder.iterdir() if p.is_file() and p.name.endswith(_WEIGHT_SUFFIXES))


def files_weights_hash(folder: Path) -> str:
    """The weights hash of a model known by its files: sha256 over each weight file's name and sha256."""
    digest = hashlib.sha256()
    for path in weight_files(folder):
        digest.update(f"{path.name}|{file_sha256(path)}\n".encode())
    return digest.hexdigest()


def parameter_count(model: PreTrainedModel) -> int:
    """The model's parameters (a tied pair once, also where accelerate's hooks untied it: `offload.untied`), and the
    weights torch's quantized modules pack outside them (`quantize_dynamic`'s Linear keeps its weight and bias in
    ``_packed_params``, read through its ``weight()`` and ``bias()`` methods)."""
    count = sum(p.numel() for p in model.parameters()) - offload.untied(model)
    for module in model.modules():
        if hasattr(module, "_packed_params") and callable(getattr(module, "weight", None)):
            bias = module.bias() if callable(getattr(module, "bias", None)) else None
            count += module.weight().numel() + (0 if bias is None else bias.numel())
    return int(count)
