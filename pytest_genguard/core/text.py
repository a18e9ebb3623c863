"""Text for people: quoted tokens, numbers, terminal widths. Shared by the failure text, the HTML report, the CLI.

Tokens are quoted like `repr()` so whitespace is visible; bytes of partial UTF-8 sequences (stored as lone
surrogates, see `trace.Step.token_bytes`) are shown as ``\\xNN``.
"""

from __future__ import annotations

import math
import re
import unicodedata

__all__ = ["clean", "display_token", "display_width", "escape_char", "number", "pad", "plural", "quote"]

_SIMPLE_ESCAPES = {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_SURROGATE = re.compile("[\ud800-\udfff]")
_CONTROL = re.compile("[\x00-\x1f\x7f\u0085\u2028\u2029]")


def escape_char(c: str) -> str:
    """One character as `quote` shows it: escapes for whitespace, control characters and raw bytes."""
    if c in _SIMPLE_ESCAPES:
        return _SIMPLE_ESCAPES[c]
    code = ord(c)
    if 0xDC80 <= code <= 0xDCFF:  # a byte of an incomplete UTF-8 sequence (surrogateescape)
        return f"\\x{code - 0xDC00:02x}"
    if c.isprintable():
        return c
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def display_width(text: str) -> int:
    """Terminal columns `text` takes: wide (East Asian, emoji) characters count 2, combining marks 0."""
    width = 0
    for c in text:
        if unicodedata.combining(c):
            continue
        width += 2 if unicodedata.east_asian_width(c) in ("W", "F") else 1
    return width


def quote(text: str, limit: int | None = None) -> str:
    """`text` in single quotes with whitespace, control characters and raw bytes escaped.

    With `limit`, the escaped content is cut to about `limit` columns and ``...`` follows the closing quote.
    """
    parts = [escape_char(c) for c in text]
    if limit is not None and display_width("".join(parts)) > limit:
        kept: list[str] = []
        width = 0
        for part in parts:
            w = display_width(part)
            if width + w > max(limit - 3, 1):
                break
            kept.append(part)
            width += w
        return "'" + "".join(kept) + "'..."
    return "'" + "".join(parts) + "'"


def pad(text: str, width: int) -> str:
    """`text` padded with spaces to `width` terminal columns."""
    return text + " " * max(width - display_width(text), 0)


def number(value: float | None, digits: int = 4) -> str:
    """A float for humans: `digits` significant digits, nan/inf spelled out, None as '?'."""
    if value is None:
        return "?"
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.{digits}g}"


def plural(n: int, word: str, plural_form: str | None = None) -> str:
    """``1 step``, ``2 steps`` (or the given plural form)."""
    return f"{n} {word if n == 1 else (plural_form or word + 's')}"


def clean(text: str) -> str:
    """Text safe to write as UTF-8: bytes kept as lone surrogates become ``\\xNN``, other surrogates ``\\uXXXX``."""
    return _SURROGATE.sub(
        lambda m: (
            f"\\x{ord(m.group()) - 0xDC00:02x}" if 0xDC80 <= ord(m.group()) <= 0xDCFF else f"\\u{ord(m.group()):04x}"
        ),
        text,
    )


def display_token(token: str) -> str:
    """A token as a reader should see it: visible spaces and control characters, surrogates as ``\\xNN``."""
    text = clean(token).replace(" ", "\u2423")
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)
