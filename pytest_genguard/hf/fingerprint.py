"""Model and tokenizer fingerprints: what lets a snapshot tell "the model changed" from "the model regressed"."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_genguard.core.files import file_sha256
from pytest_genguard.core.jsontext import JSONScalar
from pytest_genguard.core.trace import ModelFingerprint, TokenizerFingerprint
from pytest_genguard.hf import weights_watch
from pytest_genguard.hf.adapters import adapter_identity

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

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


def _fold_rope(config: dict[str, Any]) -> None:
    """Rewrite 4.x rope keys as 5.x's ``rope_parameters`` (theta, type, scaling, partial factor), in place."""
    if isinstance(config.get("rope_parameters"), dict):
        for key in _ROPE_KEYS:
            config.pop(key, None)  # 5.x: the same values are inside rope_parameters
        return
    if "rope_theta" not in config and "rotary_emb_base" not in config:
        return  # no rotary embeddings (gpt2, t5)
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
    config["rope_parameters"] = rope


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
            _flatten(value, f"{name}.", out, fold=key not in ("rope_parameters", "rope_scaling"))
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


def weights_hash(model: PreTrainedModel, *, cached: bool = True) -> str:
    """sha256 over every parameter and buffer as stored (name, dtype, shape, bytes); device independent.

    Hashing every weight costs as much as a decoding step of a large model, so the digest is computed once per model
    state and reused (`pytest_genguard.hf.weights_watch`): while no weight changed, a call costs a walk over the state
    dict and no read of the weights. `cached=False` hashes every weight now (and refreshes the cache).
    """
    import torch

    state = model.state_dict(keep_vars=True)
    # Only plain tensors can be watched: torch's quantized modules (`quantize_dynamic`) keep their weights packed and
    # write them into the state dict as a (weight, bias) tuple unpacked anew on every call, and a tensor subclass
    # (torchao's Int8Tensor) keeps its data in inner tensors the watch does not see: such models are hashed anew.
    plain = (torch.Tensor, torch.nn.Parameter)
    watchable = all(type(t) in plain and not t.is_quantized for t in state.values())
    if cached and watchable:
        digest = weights_watch.lookup(model, state)
        if digest is not None:
            return digest
    digest = state_dict_sha256(state)
    if watchable:
        weights_watch.remember(model, state, digest)
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
    """The model's parameters, and the weights torch's quantized modules pack outside them (`quantize_dynamic`'s
    Linear keeps its weight and bias in ``_packed_params``, read through its ``weight()`` and ``bias()`` methods)."""
    count = sum(p.numel() for p in model.parameters())
    for module in model.modules():
        if hasattr(module, "_packed_params") and callable(getattr(module, "weight", None)):
            bias = module.bias() if callable(getattr(module, "bias", None)) else None
            count += module.weight().numel() + (0 if bias is None else bias.numel())
    return int(count)


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


HASH_VERSION = 2
"""The version of `tokenizer_fingerprint`'s hash for a tokenizer with a `tokenizers` backend (see
`TokenizerFingerprint.hash_version`); a tokenizer without one is hashed as in version 1."""


_VOCAB_MARK = b',"vocab":{'
_MERGES_MARK = b'},"merges":['


def _model_digests(raw: bytes) -> tuple[dict[str, str], int | None]:
    """sha256 of the backend model's serialization, segment by segment, and how many merges it holds.

    A BPE model serializes as ``{"type": ..., options, "vocab": {...}, "merges": [...]}``: its vocabulary and merges
    are hashed apart, so a change is named; any other model is one segment. The markers cannot occur inside a JSON
    string (its quotes are escaped) or as a vocabulary entry (whose value is a number, not ``{`` or ``[``); merges are
    counted by the separator between two of them, pairs (``],["``, tokenizers >= 0.20) or strings (``","``)."""
    vocab_at = raw.find(_VOCAB_MARK)
    merges_at = raw.find(_MERGES_MARK, vocab_at) if vocab_at >= 0 else -1
    if merges_at < 0:
        return {"model": hashlib.sha256(raw).hexdigest()}, None
    view = memoryview(raw)
    digests = {
        "options": hashlib.sha256(view[:vocab_at]).hexdigest(),
        "vocab": hashlib.sha256(view[vocab_at : merges_at + 1]).hexdigest(),
        "merges": hashlib.sha256(view[merges_at + 1 :]).hexdigest(),
    }
    body = merges_at + len(_MERGES_MARK)
    first = raw[body : body + 1]
    separator = {b"[": b'],["', b'"': b'","'}.get(first)
    count = 0 if first == b"]" else None if separator is None else raw.count(separator, body) + 1
    return digests, count


def _backend_identity(backend: Any) -> tuple[str, dict[str, JSONScalar]]:
    """What version 2 hashes for a `tokenizers` backend (its model's own serialization, read without a JSON parse:
    the vocabulary and merges are most of it), and the parts; the added tokens, the normalizer and the counts as
    version 1 gave them, so they compare across versions."""
    raw = backend.model.__getstate__()
    digests, merges = _model_digests(raw)
    added = sorted((int(i), t.content, bool(t.special)) for i, t in backend.get_added_tokens_decoder().items())
    parts: dict[str, JSONScalar] = {"vocab": int(backend.get_vocab_size(with_added_tokens=False))}
    if "vocab" in digests:
        parts["vocab_hash"] = digests["vocab"][:12]
        if merges is not None:
            parts["merges"] = merges
        parts["merges_hash"] = digests["merges"][:12]
    else:
        parts["model_hash"] = digests["model"][:12]
    parts["added_tokens"] = len(added)
    parts["added_tokens_hash"] = _short_hash([[i, content] for i, content, _ in added])
    normalizer = backend.normalizer
    parts["normalizer"] = "none" if normalizer is None else _short_hash(json.loads(normalizer.__getstate__()))
    identity = json.dumps({"model": digests, "added_tokens": added}, sort_keys=True, ensure_ascii=False)
    return identity, parts


def legacy_tokenizer_hash(tokenizer: PreTrainedTokenizerBase) -> str:
    """The tokenizer hash of version 1 (sha256 of a canonical JSON text of the serialized vocabulary, merges and
    added tokens, and the specials), which training identities (`run_state.training_identity`) are made of: a
    history recorded before version 2 keeps its recipe. About a second for a 150k-token vocabulary, once per
    training run; `tokenizer_fingerprint` no longer pays it."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return _tokenizer_fingerprint(tokenizer).hash  # version 1 is still the hash of a tokenizer without one
    doc = json.loads(backend.to_str())
    added = doc.get("added_tokens") or []
    canonical = sorted((t.get("id"), t.get("content"), t.get("special")) for t in added)
    text = json.dumps({"model": doc.get("model"), "added_tokens": canonical}, sort_keys=True, ensure_ascii=False)
    return _digest(text, _specials(tokenizer))


def _specials(tokenizer: PreTrainedTokenizerBase) -> dict[str, str]:
    return {k: str(v) for k, v in sorted(tokenizer.special_tokens_map.items())}


def _digest(text: str, specials: dict[str, str]) -> str:
    body = text + "\n" + json.dumps(specials, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest()


# Each tokenizer's fingerprint with the cheap state it was computed for (`_tokenizer_state`): serializing a 150k-token
# vocabulary and its merges costs 130-250 ms, which record() would otherwise pay on every call.
_TOKENIZERS: weakref.WeakKeyDictionary[Any, tuple[tuple[Any, ...], TokenizerFingerprint]] = weakref.WeakKeyDictionary()


def _tokenizer_state(tokenizer: PreTrainedTokenizerBase) -> tuple[Any, ...] | None:
    """What changes when a tokenizer's vocabulary, merges, specials or chat template change, read without
    serializing it: the backend object, its size with added tokens, the specials, the template and a few ids' tokens.
    (The tokenizers API edits a vocabulary only by adding tokens, or by replacing the backend or its model.) None
    for a tokenizer without a backend: fingerprinted on every call."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    size = int(backend.get_vocab_size(with_added_tokens=True))
    probes = tuple(backend.id_to_token(i) for i in sorted({0, size // 3, (2 * size) // 3, max(size - 1, 0)}))
    specials = tuple(sorted((k, str(v)) for k, v in tokenizer.special_tokens_map.items()))
    return (id(backend), size, len(tokenizer), probes, specials, tuple(tokenizer.all_special_ids))


def tokenizer_fingerprint(tokenizer: PreTrainedTokenizerBase) -> TokenizerFingerprint:
    """Fingerprint of the tokenizer: its vocabulary, merges, added tokens and specials (the `tokenizers` backend's
    own serialization of its model where it has one, `HASH_VERSION`; else its vocabulary), and its chat template.
    Computed once per tokenizer state (see `_tokenizer_state`); the chat template is read on every call."""
    state = _tokenizer_state(tokenizer)
    try:
        cached = _TOKENIZERS.get(tokenizer) if state is not None else None
    except TypeError:  # not weakly referenceable
        cached, state = None, None
    if cached is not None and cached[0] == state:
        return dataclasses.replace(cached[1], chat_template=chat_template_text(tokenizer))
    fingerprint = _tokenizer_fingerprint(tokenizer)
    if state is not None:
        _TOKENIZERS[tokenizer] = (state, fingerprint)
    return fingerprint


def _tokenizer_fingerprint(tokenizer: PreTrainedTokenizerBase) -> TokenizerFingerprint:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    specials = _specials(tokenizer)
    if backend is not None:
        # The vocabulary, merges and added tokens: what maps text to ids. The rest of the serialized form (an empty
        # post-processor, version fields) differs between transformers versions for the same tokenizer; a change
        # there that matters shows as changed prompt ids, which the comparison reports as such.
        text, parts = _backend_identity(backend)
        version = HASH_VERSION
    else:
        text = json.dumps(sorted(tokenizer.get_vocab().items()), ensure_ascii=False)
        parts, version = {"vocab": len(tokenizer.get_vocab())}, 1
    parts.update({f"special.{k}": v for k, v in specials.items()})
    return TokenizerFingerprint(
        name="PreTrainedTokenizerFast" if backend is not None else type(tokenizer).__name__,  # 5.x: TokenizersBackend
        vocab_size=len(tokenizer),
        hash=_digest(text, specials),
        chat_template=chat_template_text(tokenizer),
        parts=parts,
        hash_version=version,
    )


def _short_hash(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def chat_template_text(tokenizer: PreTrainedTokenizerBase) -> str | None:
    """The tokenizer's chat template as one text (named templates each after a ``{#- template: name -#}`` line, in
    name order); None without one."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        return "\n".join(f"{{#- template: {name} -#}}\n{text}" for name, text in sorted(template.items())) or None
    return template if isinstance(template, str) and template else None
