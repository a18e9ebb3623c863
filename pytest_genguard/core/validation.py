"""The checks of user arguments that every entry point shares (as hypothesis' ``internal/validation.py``).

Each takes `where`, the call the argument was given to (``"record()"``, ``"GenerationRecorder()"``,
``"assert_deterministic"``), and raises a `ValueError` that names it, the argument and its value: bad input fails
here, with a message saying what to pass, rather than deep inside transformers. Standard library only.
"""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["integer", "optional_integer", "prompt_list", "seed", "short"]


def short(value: Any) -> str:
    """`value`'s repr, cut to one readable line for a message."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def integer(value: Any, name: str, *, minimum: int, where: str) -> int:
    """`value` as an int when it is an integer (not a bool, not a float such as 2.5) of at least `minimum`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        hint = f" (for example {name}={math.floor(value)})" if isinstance(value, float) and math.isfinite(value) else ""
        raise ValueError(f"{where}: {name} must be an integer >= {minimum}, got {value!r}{hint}.")
    number = operator.index(value)
    if number < minimum:
        raise ValueError(f"{where}: {name} must be an integer >= {minimum}, got {number}.")
    return number


def optional_integer(value: Any, name: str, *, where: str) -> int | None:
    """`value` as an int, or None; a bool or a float is refused (a seed of 2.5 would silently be seed 2)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{where}: {name} must be an integer or None, got {value!r}.")
    return operator.index(value)


SEED_RANGE = (-(2**63), 2**64 - 1)
"""What `torch.manual_seed` takes (beyond it torch fails with "Overflow when unpacking long")."""


def seed(value: Any, *, where: str) -> int | None:
    """A seed for torch: an integer in `SEED_RANGE`, or None."""
    number = optional_integer(value, "seed", where=where)
    if number is not None and not SEED_RANGE[0] <= number <= SEED_RANGE[1]:
        raise ValueError(
            f"{where}: seed must be an integer from -2**63 to 2**64 - 1 (torch's seed range) or None, got {number}."
        )
    return number


def prompt_list(prompts: Any, *, where: str) -> list[str]:
    """The prompts as a list of strings: one string, or a non-empty list (any iterable) of strings."""
    if isinstance(prompts, str):
        return [prompts]
    if isinstance(prompts, (bytes, bytearray, Mapping)) or not isinstance(prompts, Iterable):
        raise ValueError(
            f"{where}: prompts must be a string or a list of strings, got {type(prompts).__name__} {short(prompts)}."
        )
    items = list(prompts)
    if not items:
        raise ValueError(f"{where}: prompts is empty; pass one prompt or a list of prompts.")
    for index, item in enumerate(items):
        if not isinstance(item, str):
            raise ValueError(
                f"{where}: prompt {index} is {type(item).__name__} {short(item)}, not a string; pass the prompts "
                f"as text ({where} tokenizes them with the tokenizer it is given)."
            )
        lone = next((i for i, ch in enumerate(item) if "\ud800" <= ch <= "\udfff"), None)
        if lone is not None:  # tokenizers fails on it with a bare TypeError; it cannot be written as UTF-8 either
            raise ValueError(
                f"{where}: prompt {index} {short(item)} has a lone surrogate {item[lone]!r} at position {lone}: "
                "it is not text a tokenizer can read (often bytes decoded with errors='surrogateescape'); decode "
                "the bytes with errors='replace', or remove the character."
            )
    return items
