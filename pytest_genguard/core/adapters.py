"""What two traces' adapter identities say (PEFT adapters, `ModelFingerprint.adapters`): a switched, disabled,
added or retrained adapter is another subject (stale, named), never a regression; a merged adapter against the
unmerged one computes the same function in other rounding, so the values decide and the line says "merged".

The identity is flat (``active``, ``disabled``, ``merged``, and per loaded adapter ``NAME.r``, ``NAME.lora_alpha``,
``NAME.target_modules``, ``NAME.weights``, ...), written by `pytest_genguard.hf.adapters`.
"""

from __future__ import annotations

from collections.abc import Mapping

from pytest_genguard.core.jsontext import JSONScalar, same_scalar
from pytest_genguard.core.text import quote

__all__ = ["adapter_changes", "merge_note"]

Identity = Mapping[str, JSONScalar] | None


def _names(value: JSONScalar) -> list[str]:
    return [n for n in str(value or "").split(",") if n]


def _describe(identity: Identity) -> str:
    if identity is None:
        return "none"
    active = _names(identity.get("active"))
    parts = [
        f"{quote(name)} (r {identity.get(f'{name}.r')}, alpha {identity.get(f'{name}.lora_alpha')})" for name in active
    ]
    return ", ".join(parts) or "none active"


def adapter_changes(expected: Identity, actual: Identity, *, weights: bool = True) -> list[str]:
    """The changes that make a snapshot stale, each naming the adapter; empty when only the merged state moved.
    `weights=False` for models made by one training recipe: other adapter weights are then drift of the environment
    that trained them (as the base weights are), and the values decide."""
    if expected is None and actual is None:
        return []
    if expected is None or actual is None:
        return [f"adapters {_describe(expected)} -> {_describe(actual)}"]
    changes = []
    old_active, new_active = _names(expected.get("active")), _names(actual.get("active"))
    if old_active != new_active:
        changes.append(f"active adapter {_describe(expected)} -> {_describe(actual)}")
    if bool(expected.get("disabled")) != bool(actual.get("disabled")):
        state = "disabled" if actual.get("disabled") else "enabled again"
        changes.append(f"adapter {', '.join(quote(n) for n in new_active)} {state}")
    for name in sorted(set(old_active) & set(new_active)):
        prefix = f"{name}."
        keys = sorted(k for k in set(expected) | set(actual) if k.startswith(prefix))
        for key in keys:
            old, new = expected.get(key), actual.get(key)
            if old is None or new is None or not same_scalar(old, new):
                field = key[len(prefix) :]
                if field == "weights" and not weights:
                    continue
                if field == "weights":
                    changes.append(f"adapter {quote(name)} weights {str(old)[:12]} -> {str(new)[:12]}")
                else:
                    changes.append(f"adapter {quote(name)} {field} {old!r} -> {new!r}")
    return changes


def merge_note(expected: Identity, actual: Identity) -> str | None:
    """ "adapter 'x' merged (the snapshot's was not): judged by values" when the merged state is all that moved."""
    if expected is None or actual is None or adapter_changes(expected, actual):
        return None
    old, new = _names(expected.get("merged")), _names(actual.get("merged"))
    if old == new:
        return None
    if new:
        return f"adapter {', '.join(quote(n) for n in new)} merged (the snapshot's was not): judged by values"
    return f"adapter {', '.join(quote(n) for n in old)} unmerged (merged in the snapshot): judged by values"
