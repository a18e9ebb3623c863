"""The tokenizer's fingerprint: what maps text to ids (the `tokenizers` backend's own serialization of its model,
hashed part by part so a change is named; its added tokens and specials) and its chat template, computed once per
tokenizer state; and the hash of version 1, which training identities are made of (`legacy_tokenizer_hash`)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import weakref
from typing import TYPE_CHECKING, Any

from pytest_genguard.core.jsontext import JSONScalar
from pytest_genguard.core.trace import TokenizerFingerprint

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["HASH_VERSION", "chat_template_text", "legacy_tokenizer_hash", "tokenizer_fingerprint"]


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
