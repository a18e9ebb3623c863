"""Model and tokenizer fingerprints: what lets a snapshot tell "the model changed" from "the model regressed"."""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pytest_genguard.trace import ModelFingerprint, TokenizerFingerprint

if TYPE_CHECKING:
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


def _clean_config(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _clean_config(v) for k, v in sorted(value.items()) if k not in _VOLATILE_CONFIG_KEYS}
    if isinstance(value, list):
        return [_clean_config(v) for v in value]
    return value


def config_hash(model: PreTrainedModel) -> str:
    """sha256 of the model config without volatile keys (stable across transformers versions and devices)."""
    raw = model.config.to_dict()
    text = json.dumps(_clean_config(raw), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def weights_hash(model: PreTrainedModel, *, cached: bool = True) -> str:
    """sha256 over every parameter and buffer as stored (name, dtype, shape, bytes); device independent.

    Hashing every weight costs as much as a decoding step of a large model, so the digest is computed once per model
    state and reused (`pytest_genguard.weights_watch`): while no weight changed, a call costs a walk over the state dict
    and no read of the weights. `cached=False` hashes every weight now (and refreshes the cache).
    """
    from pytest_genguard import weights_watch

    state = model.state_dict(keep_vars=True)
    if cached:
        digest = weights_watch.lookup(model, state)
        if digest is not None:
            return digest
    digest = state_dict_sha256(state)
    weights_watch.remember(model, state, digest)
    return digest


def forget_weights(model: PreTrainedModel) -> None:
    """Drop `model`'s cached weights hash: the next fingerprint hashes every weight again.

    Needed only after changing a few weights in a way torch does not track (in place through `.data` or a numpy view,
    away from the sampled elements: see `pytest_genguard.weights_watch`).
    """
    from pytest_genguard import weights_watch

    weights_watch.forget(model)


def state_dict_sha256(state: Mapping[str, Any]) -> str:
    """The weights hash of a state dict: sha256 over its entries sorted by name, each as `name|dtype|shape|` and the
    tensor's bytes. Reads every weight (copying each tensor to the host in turn)."""
    import torch

    digest = hashlib.sha256()
    for name, tensor in sorted(state.items()):
        t = tensor.detach().to("cpu").contiguous()
        digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        digest.update(t.reshape(-1).view(torch.uint8).numpy())  # the buffer itself: no copy of every weight
    return digest.hexdigest()


def model_dtype(model: PreTrainedModel) -> str:
    """The floating dtype of the parameters, as 'float32' / 'bfloat16' / 'float16'."""
    for p in model.parameters():
        if p.is_floating_point():
            return str(p.dtype).removeprefix("torch.")
    return "float32"


def model_fingerprint(model: PreTrainedModel) -> ModelFingerprint:
    """Fingerprint of the model's config and weights."""
    return ModelFingerprint(
        model_type=str(getattr(model.config, "model_type", type(model).__name__)),
        config_hash=config_hash(model),
        weights_hash=weights_hash(model),
        num_parameters=sum(p.numel() for p in model.parameters()),
        dtype=model_dtype(model),
        recipe=_recipe(model),
    )


def _recipe(model: PreTrainedModel) -> str | None:
    recipe = getattr(model.config, "genguard_recipe", None)
    return recipe if isinstance(recipe, str) else None


@functools.lru_cache(maxsize=2)
def _backend_text(serialized: str) -> str:
    """The vocabulary, merges and added tokens of a serialized tokenizer, canonical. Memoized by content: record()
    fingerprints the same tokenizer on every call, and this JSON round trip was a third of record()'s own cost."""
    doc = json.loads(serialized)
    added = sorted((t.get("id"), t.get("content"), t.get("special")) for t in doc.get("added_tokens") or [])
    return json.dumps({"model": doc.get("model"), "added_tokens": added}, sort_keys=True, ensure_ascii=False)


def tokenizer_fingerprint(tokenizer: PreTrainedTokenizerBase) -> TokenizerFingerprint:
    """Fingerprint of the tokenizer: its full serialized form where it has one, else its vocabulary and specials."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        # The vocabulary, merges and added tokens: what maps text to ids. The rest of the serialized form (an empty
        # post-processor, version fields) differs between transformers versions for the same tokenizer; a change
        # there that matters shows as changed prompt ids, which the comparison reports as such.
        text = _backend_text(backend.to_str())
    else:
        text = json.dumps(sorted(tokenizer.get_vocab().items()), ensure_ascii=False)
    specials = json.dumps(
        {k: str(v) for k, v in sorted(tokenizer.special_tokens_map.items())}, sort_keys=True, ensure_ascii=False
    )
    digest = hashlib.sha256((text + "\n" + specials).encode("utf-8", "surrogatepass")).hexdigest()
    name = "PreTrainedTokenizerFast" if backend is not None else type(tokenizer).__name__  # 5.x: TokenizersBackend
    return TokenizerFingerprint(name=name, vocab_size=len(tokenizer), hash=digest)
