"""What makes a recorded trace *stale* rather than regressed: another model, tokenizer or chat template, other
decoding settings or prompts. Each reason names what changed (a config key, an adapter, a tokenizer part, the first
differing line of a template, where two prompts differ), so a failure says why without a diff of two hashes.
Pure standard library; `pytest_genguard.core.compare` applies it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

from pytest_genguard.core.adapters import adapter_changes, merge_note
from pytest_genguard.core.jsontext import JSONScalar, changed_keys, same_scalar
from pytest_genguard.core.text import quote
from pytest_genguard.core.text_diff import first_differing_line, prompt_difference
from pytest_genguard.core.trace import GenerationTrace, ModelFingerprint, TokenizerFingerprint

__all__ = ["Fingerprints", "fingerprints_option", "stale_reasons"]


class Fingerprints(enum.Enum):
    """Which fingerprints `compare()` holds two traces to (its ``check_fingerprints``): one that changed makes the
    recorded trace stale. ``True`` means `ALL`, ``False`` `NONE`."""

    ALL = "all"
    """The model and the tokenizer with its chat template: the snapshot rule."""
    TOKENIZER = "tokenizer"
    """The tokenizer and its chat template, not the model: a cast or quantized copy is another model on purpose,
    but it must read and write the same tokens for its distributions to be comparable (a fidelity budget)."""
    NONE = "none"
    """Neither: two models (or tokenizers) compared on purpose (`verify()`)."""


def fingerprints_option(value: bool | Fingerprints) -> Fingerprints:
    """`compare()`'s ``check_fingerprints`` as a `Fingerprints` member (``True``/``False`` as `ALL`/`NONE`)."""
    if isinstance(value, Fingerprints):
        return value
    if isinstance(value, bool):
        return Fingerprints.ALL if value else Fingerprints.NONE
    raise TypeError(
        f"compare: check_fingerprints must be True, False or a Fingerprints member "
        f"(Fingerprints.ALL, .TOKENIZER, .NONE), got {value!r}"
    )


def _short_hash(value: str) -> str:
    return value[:12]


def _value(value: JSONScalar) -> str:
    return quote(value, 40) if isinstance(value, str) else repr(value)


def _mapping_changes(expected: Mapping[str, JSONScalar], actual: Mapping[str, JSONScalar]) -> list[tuple[str, str]]:
    changes = []
    for key in changed_keys(expected, actual):
        old = _value(expected[key]) if key in expected else "(unset)"
        new = _value(actual[key]) if key in actual else "(unset)"
        changes.append((key, f"{old} -> {new}"))
    return changes


def _config_changes(expected: ModelFingerprint, actual: ModelFingerprint) -> list[str]:
    """Architecture keys set on both sides with other values. A key one side lacks is not a change: transformers
    versions add, drop and rename config keys for the same model (4.57 writes ~35 keys 5.x does not)."""
    if expected.config is None or actual.config is None:
        if expected.config is None and actual.config is None and expected.config_hash != actual.config_hash:
            return [f"config {_short_hash(expected.config_hash)} -> {_short_hash(actual.config_hash)}"]
        return []  # a trace of pytest-genguard 0.1 hashed the config another way: the weights still decide
    keys = sorted(k for k in set(expected.config) & set(actual.config))
    changed = [
        f"config {k} {_value(expected.config[k])} -> {_value(actual.config[k])}"
        for k in keys
        if not same_scalar(expected.config[k], actual.config[k])
    ]
    return changed[:3] + ([f"{len(changed) - 3} more config keys"] if len(changed) > 3 else [])


_TOKENIZER_PARTS = (("vocab", "vocabulary"), ("merges", "merges"), ("added_tokens", "added tokens"))


# Short hashes whose definition changed with the tokenizer hash (version 2 hashes the backend's own serialization):
# across versions they are not compared; the counts, added tokens, normalizer and specials are.
_HASHED_PER_VERSION = frozenset({"vocab_hash", "merges_hash", "model_hash"})


def _tokenizer_changes(expected: TokenizerFingerprint, actual: TokenizerFingerprint) -> list[str]:
    """What changed between two tokenizers, part by part (`TokenizerFingerprint.parts`); empty when a side does not
    have its parts (then, across hash versions, the vocabulary size and class are all that compare)."""
    e, a = expected.parts, actual.parts
    changes = []
    if expected.vocab_size != actual.vocab_size:
        changes.append(f"vocabulary size {expected.vocab_size} -> {actual.vocab_size}")
    if e is None or a is None:
        if expected.hash_version == actual.hash_version:
            return []  # the hashes say it
        return changes + ([f"class {expected.name} -> {actual.name}"] if expected.name != actual.name else [])
    same_version = expected.hash_version == actual.hash_version
    for key, label in _TOKENIZER_PARTS:
        hashed = f"{key}_hash"
        if e.get(key) != a.get(key):
            changes.append(f"{label} {_value(e.get(key))} -> {_value(a.get(key))}")
        elif (same_version or hashed not in _HASHED_PER_VERSION) and e.get(hashed) != a.get(hashed):
            changes.append(f"{label} changed ({_value(e.get(key))} entries)")
    if same_version and e.get("model_hash") != a.get("model_hash"):
        changes.append(f"model {_bare(e.get('model_hash'))} -> {_bare(a.get('model_hash'))}")
    if e.get("normalizer") != a.get("normalizer"):
        changes.append(f"normalizer {_bare(e.get('normalizer'))} -> {_bare(a.get('normalizer'))}")
    for key in sorted(k for k in set(e) | set(a) if k.startswith("special.")):
        if e.get(key) != a.get(key):
            old = _value(e[key]) if key in e else "(unset)"
            new = _value(a[key]) if key in a else "(unset)"
            changes.append(f"special token {key.removeprefix('special.')} {old} -> {new}")
    if expected.name != actual.name:
        changes.append(f"class {expected.name} -> {actual.name}")
    return changes


def _origin(model: ModelFingerprint) -> str:
    name = model.name_or_path or "?"
    return name if model.revision is None else f"{name}@{_short_hash(model.revision)}"


def _origin_change(expected: ModelFingerprint, actual: ModelFingerprint) -> str | None:
    """Where two sets of weights came from, when known and different: ``revision abc123 -> def456 of org/model`` (one
    hub id at two commits), else ``org/a@abc123 -> org/b`` (None: neither side knows, or both say the same)."""
    e, a = (expected.name_or_path, expected.revision), (actual.name_or_path, actual.revision)
    if e == a or e == (None, None) or a == (None, None):
        return None  # the same origin, or one trace recorded without it: the hashes say it
    if e[0] == a[0] and e[1] is not None and a[1] is not None:
        return f"revision {_short_hash(e[1])} -> {_short_hash(a[1])} of {e[0] or '?'}"
    return f"{_origin(expected)} -> {_origin(actual)}"


def _bare(value: JSONScalar) -> str:
    return "?" if value is None else str(value)


def stale_reasons(expected: GenerationTrace, actual: GenerationTrace, fingerprints: Fingerprints) -> tuple[str, ...]:
    """Why `expected` no longer describes what `actual` was made of: a changed model, tokenizer or chat template
    (as far as `fingerprints` asks), decoding settings or prompts. Empty when nothing changed."""
    reasons = []
    em, am = expected.model, actual.model
    if fingerprints is Fingerprints.ALL and em is not None and am is not None:
        changes = []
        if em.model_type != am.model_type:
            changes.append(f"model_type {em.model_type} -> {am.model_type}")
        changes += _config_changes(em, am)
        if em.recipe is not None and am.recipe is not None:
            # Made by training (genguard's fine-tuning, or a run a GenerationRecorder watched): the recipe is the
            # model's identity; other weights from one recipe are drift of the environment that trained them (a
            # torch or transformers upgrade, another CPU), and that is what gets compared.
            if em.recipe != am.recipe:
                changes.append(f"training recipe {_short_hash(em.recipe)} -> {_short_hash(am.recipe)}")
        else:
            merged = merge_note(em.adapters, am.adapters) is not None  # the same function: the values decide
            if em.dtype == am.dtype and em.weights_hash != am.weights_hash and not merged:
                # Across dtypes the bytes differ by construction: dtype is an environment axis, listed with the rest.
                weights = f"weights {_short_hash(em.weights_hash)} -> {_short_hash(am.weights_hash)}"
                origin = _origin_change(em, am)
                changes.append(weights if origin is None else f"{weights} ({origin})")
        trained = em.recipe is not None and am.recipe is not None
        changes += adapter_changes(em.adapters, am.adapters, weights=not trained)
        if changes:
            reasons.append("model changed: " + ", ".join(changes))
    et, at = expected.tokenizer, actual.tokenizer
    if fingerprints is not Fingerprints.NONE and et is not None and at is not None:
        if et.hash_version != at.hash_version:
            # Hashes of two versions (a snapshot recorded before version 2) say nothing about each other: what both
            # versions define alike decides. A tokenizer change these prompts meet still shows as changed prompt ids.
            changes = _tokenizer_changes(et, at)
            if changes:
                reasons.append("tokenizer changed: " + ", ".join(changes))
        elif et.hash != at.hash:
            changes = _tokenizer_changes(et, at)
            if not changes:  # a trace written before the parts: the hashes are all it has
                changes = [f"{et.name} {_short_hash(et.hash)} -> {at.name} {_short_hash(at.hash)}"]
            reasons.append("tokenizer changed: " + ", ".join(changes))
        if et.chat_template != at.chat_template:
            reasons.append("chat template changed: " + first_differing_line(et.chat_template, at.chat_template))
    settings = _mapping_changes(expected.settings, actual.settings)
    if settings:
        reasons.append("decoding settings changed: " + ", ".join(f"{k} {change}" for k, change in settings))
    prompt_changes = []
    if len(expected.prompts) != len(actual.prompts):
        prompt_changes.append(f"{len(expected.prompts)} -> {len(actual.prompts)} prompts")
    moved = [
        f"prompt {i} {prompt_difference(e, a)}"
        for i, (e, a) in enumerate(zip(expected.prompts, actual.prompts, strict=False))
        if e.prompt != a.prompt or e.messages != a.messages
    ]
    prompt_changes += moved[:3] + ([f"{len(moved) - 3} more"] if len(moved) > 3 else [])
    if prompt_changes:
        reasons.append("prompts changed: " + ", ".join(prompt_changes))
    return tuple(reasons)
