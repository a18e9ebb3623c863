"""Where two texts first differ, for stale reasons and review lines a reader can act on: two prompts that share their
first 28 characters were both shown cut to the same text ("prompts changed: 'You are a helpful assistant...' -> 'You
are a helpful assistant...'"); two prompts (`prompt_difference`: conversations by their first differing message) are
named where they differ, a changed chat template by its first differing line."""

from __future__ import annotations

from pytest_genguard.core.jsontext import json_text
from pytest_genguard.core.text import quote
from pytest_genguard.core.trace import PromptTrace

__all__ = ["first_differing_line", "prompt_difference", "where_texts_differ"]

_BEFORE = 12
"""Characters of common text shown before the first difference."""


def _first_difference(old: str, new: str) -> int:
    return next((i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), min(len(old), len(new)))


def where_texts_differ(old: str, new: str, width: int = 30) -> str:
    """``at character N: ...'old' -> ...'new'`` (N > 0): each side from a little before its first differing character,
    cut to about `width` columns."""
    at = _first_difference(old, new)
    start = max(0, at - _BEFORE)
    lead = "..." if start else ""
    where = f"at character {at}: " if at else ""
    return f"{where}{lead}{quote(old[start:], width)} -> {lead}{quote(new[start:], width)}"


def first_differing_line(old: str | None, new: str | None, width: int = 60) -> str:
    """``line N at character M: ...'old' -> ...'new'`` for two multi-line texts (None: no text on that side)."""
    if old is None or new is None:
        lines = len((new if old is None else old).splitlines())  # type: ignore[union-attr]
        return f"none -> a template of {lines} lines" if old is None else f"a template of {lines} lines -> none"
    old_lines, new_lines = old.splitlines(), new.splitlines()
    for n in range(max(len(old_lines), len(new_lines))):
        a = old_lines[n] if n < len(old_lines) else None
        b = new_lines[n] if n < len(new_lines) else None
        if a != b and a is not None and b is not None:
            return f"line {n + 1} {where_texts_differ(a, b, width)}"
        if a != b:
            shown_a = "(no line)" if a is None else quote(a, width)
            shown_b = "(no line)" if b is None else quote(b, width)
            return f"line {n + 1}: {shown_a} -> {shown_b}"
    return f"the same lines, other line endings or whitespace: {where_texts_differ(old, new)}"


def prompt_difference(e: PromptTrace, a: PromptTrace) -> str:
    """Where two prompts differ: the first differing message of two conversations, else the first differing
    character of their texts."""
    if e.messages is not None and a.messages is not None:
        if len(e.messages) != len(a.messages):
            return f"{len(e.messages)} -> {len(a.messages)} messages"
        for n, (em, am) in enumerate(zip(e.messages, a.messages, strict=True)):
            if em != am:
                role = em.get("role", "?")
                old, new = str(em.get("content", "")), str(am.get("content", ""))
                if em.get("role") != am.get("role") or old == new:
                    return f"message {n}: {json_text(em)[:40]} -> {json_text(am)[:40]}"
                return f"message {n} ({role}) {where_texts_differ(old, new)}"
    return where_texts_differ(e.prompt, a.prompt)
