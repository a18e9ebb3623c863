"""The JSON text genguard writes for people to diff: floats as the shortest decimal of their float32 value, NaN and
infinities as strings, strings with the line breaks and lone surrogates of raw bytes escaped, mappings one key per line
in sorted order. Used by the trace and the recorder history formats. Standard library only.
"""

from __future__ import annotations

import json
import math
import re
import struct
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "SPECIAL_FLOATS",
    "JSONScalar",
    "changed_keys",
    "exact_number",
    "float32",
    "floats_text",
    "format_float",
    "ints_text",
    "json_text",
    "mapping_text",
    "same_scalar",
    "scalar_text",
    "string_text",
]

JSONScalar = str | int | float | bool | None

SPECIAL_FLOATS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
"""How NaN and the infinities are spelled in the JSON text (as strings: JSON has no such numbers)."""


def float32(value: float) -> float:
    """Round a Python float to the nearest float32, the precision traces store."""
    if math.isnan(value) or math.isinf(value):
        return value
    try:
        return float(struct.unpack("<f", struct.pack("<f", value))[0])
    except OverflowError:
        return math.copysign(math.inf, value)


def format_float(value: float) -> str:
    """Shortest decimal text that round-trips the float32 nearest to `value`; NaN/inf as JSON strings."""
    if math.isnan(value):
        return '"nan"'
    if math.isinf(value):
        return '"inf"' if value > 0 else '"-inf"'
    target = float32(value)
    if target == 0.0:
        return "-0.0" if math.copysign(1.0, target) < 0 else "0.0"
    for digits in range(6, 10):
        text = f"{target:.{digits}g}"
        if float32(float(text)) == target:
            break
    if "e" not in text and "." not in text and "inf" not in text:
        text += ".0"
    return text


# Lone surrogates (bytes of an incomplete UTF-8 sequence) cannot be written as UTF-8; U+0085, U+2028 and U+2029 are
# line breaks to some editors and to str.splitlines(), which would break "one step per line": escape them all.
_ESCAPED = re.compile("[\ud800-\udfff\u0085\u2028\u2029]")


def string_text(value: str) -> str:
    """A JSON string literal that stays on one line and holds only UTF-8 text."""
    text = json.dumps(value, ensure_ascii=False)
    return _ESCAPED.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def json_text(value: Any) -> str:
    """Any JSON value on one line, keys sorted, UTF-8 kept (line breaks and lone surrogates escaped as in
    `string_text`): a chat message of a trace."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return _ESCAPED.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def scalar_text(value: JSONScalar) -> str:
    """A settings/environment value: kept exactly (repr), NaN/inf as strings."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        # Settings and environment values are not float32 data: keep them exactly (repr), NaN/inf as strings.
        return repr(value) if math.isfinite(value) else format_float(value)
    return string_text(value)


def mapping_text(values: Mapping[str, JSONScalar], indent: str) -> str:
    """One key per line, sorted."""
    if not values:
        return "{}"
    inner = indent + "  "
    lines = [f"{inner}{string_text(k)}: {scalar_text(v)}" for k, v in sorted(values.items())]
    return "{\n" + ",\n".join(lines) + "\n" + indent + "}"


def ints_text(values: Sequence[int]) -> str:
    return "[" + ", ".join(str(int(v)) for v in values) + "]"


def floats_text(values: Sequence[float]) -> str:
    return "[" + ", ".join(format_float(v) for v in values) + "]"


def exact_number(value: float | None) -> str:
    """A float that is not float32 data (a loss, an epoch) written exactly (repr); NaN/inf as strings, None as null."""
    if value is None:
        return "null"
    if math.isnan(value):
        return '"nan"'
    if math.isinf(value):
        return '"inf"' if value > 0 else '"-inf"'
    return repr(float(value))


def same_scalar(a: JSONScalar, b: JSONScalar) -> bool:
    """Whether two stored values are the same: of one type (1 is not 1.0 nor True) and equal, NaN equal to NaN."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return a == b


def changed_keys(expected: Mapping[str, JSONScalar], actual: Mapping[str, JSONScalar]) -> list[str]:
    """The keys whose values differ (`same_scalar`), sorted; a key set on one side only differs. The one rule for
    which fields of two stored mappings (environments, settings) changed."""
    keys = set(expected) | set(actual)
    return sorted(k for k in keys if k not in expected or k not in actual or not same_scalar(expected[k], actual[k]))
