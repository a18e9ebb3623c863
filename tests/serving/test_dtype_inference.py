"""The served dtype read from the logprobs: 16-bit logits put a step's top-k differences on a coarse grid, float32
ones do not; too few values say nothing (an error asking to declare it, never a silent float32)."""

from __future__ import annotations

import struct

import pytest

from pytest_genguard.serving.dtype import grid_of, infer_dtype, resolve_dtype


def bfloat16(x: float) -> float:
    """`x` rounded to bfloat16 (the top 16 bits of its float32, round to nearest even)."""
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return float(struct.unpack("<f", struct.pack("<I", bits))[0])


def float32(x: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", x))[0])


LOGITS = [3.1416, 2.7183, 1.4142, 1.7321, 2.2361, 0.5772]
LSE = 4.6051


def test_bfloat16_logits_lie_on_a_grid_and_float32_ones_do_not() -> None:
    as_bf16 = [float32(bfloat16(x) - LSE) for x in LOGITS]
    as_f32 = [float32(float32(x) - LSE) for x in LOGITS]
    assert grid_of(as_bf16) is not None and grid_of(as_bf16) > 0
    assert grid_of(as_f32) == 0.0
    assert infer_dtype([as_bf16, as_bf16]).dtype == "bfloat16"
    assert infer_dtype([as_bf16, as_f32]).dtype == "float32"  # 16-bit logits put every step on the grid


def test_too_few_values_to_tell_ask_for_a_declaration() -> None:
    assert grid_of([-0.1, -2.3, -4.0]) is None
    with pytest.raises(ValueError, match="declare the dtype"):
        infer_dtype([[-0.1, -2.3, -4.0]])


def test_reported_then_declared_then_inferred() -> None:
    steps = [[float32(float32(x) - LSE) for x in LOGITS]]
    assert resolve_dtype("bfloat16", None, steps, where="s").source == "reported"
    assert resolve_dtype(None, "bfloat16", steps, where="s").source == "declared"
    assert resolve_dtype(None, None, steps, where="s").describe().startswith("float32 (inferred")
    with pytest.raises(ValueError, match="you declared the served dtype float32, but the server reports bfloat16"):
        resolve_dtype("bfloat16", "float32", steps, where="s")
