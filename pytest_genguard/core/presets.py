"""The fidelity presets: each a `Budget` of limits relative to what the reference model's own conversion costs (its
calibration: `pytest_genguard.hf.fidelity.calibrate`), measured on real quantizers (docs/fidelity.md,
docs/engines.md, benchmarks/RESULTS.md: each correct quantization holds its preset with the margin written there,
and realistic bugs of the same precision fail it). Standard library only; `pytest_genguard.core.budget` re-exports
them (callers import them from there).
"""

from __future__ import annotations

from pytest_genguard.core.limits import Budget

__all__ = ["GGUF_TYPE_PRESETS", "KV_CACHE_PRESETS", "KV_CACHE_TYPES", "PRESETS"]

_CAST_RATIOS = (("kld_mean", 2.0), ("kld_p99", 3.0))
"""bf16 and fp16: a correct cast is genguard's own cast (1.00x on every metric, SmolLM2-135M and the tiny llama);
the mildest realistic bug measured, one post-attention norm off by 5% in bf16 on SmolLM2-135M, costs 2.68x on the
mean and 4.41x on p99 (docs/fidelity.md)."""
_QUANT_RATIOS = (("kld_mean", 4.0), ("kld_p99", 6.0))
"""int8 and int4: quantizers differ from genguard's round-to-nearest by method (torchao's int8 weight-only costs
1.13x on SmolLM2-135M but 2.02x the mean and 3.01x p99 on the tiny llama; optimum-quanto's int4 0.58-0.82x); the
realistic bugs cost 10x and more (one layer's down_proj in int4 per tensor: 10.7-35x; the output head int4 per
tensor on the tiny llama; torch's quantize_dynamic on SmolLM2-135M: 504x)."""

_GGUF_FIXED = "measured on SmolLM2-135M-Instruct alone (docs/engines.md)"
_GGUF_Q8_0 = (("kld_mean", 4.0), ("kld_p99", 8.0))
"""gguf-q8_0 (x the reference's own int8): llama.cpp's Q8_0 of SmolLM2-135M-Instruct costs 1.40x the mean and 3.05x
p99 of genguard's int8 (margins 2.9x, 2.6x); one FFN norm weight x1.25 costs 15.7x / 48.1x (3.9x, 6.0x outside), the
rope base 1e5 -> 1e4 31.5x / 64.9x (docs/engines.md, benchmarks/gguf_presets.py)."""
_GGUF_Q6_K = (("kld_mean", 8.0), ("kld_p99", 16.0))
"""gguf-q6_k: Q6_K costs 3.09x / 5.83x (margins 2.6x, 2.7x); the norm bug 18.3x / 57.6x (2.3x, 3.6x outside), the
rope bug 62.9x / 129x."""
_GGUF_Q4_K_M = (("kld_mean", 25.0), ("kld_p99", 35.0))
"""gguf-q4_k_m: Q4_K_M costs 13.5x / 14.7x (margins 1.85x, 2.4x); the norm bug 42.7x / 77.8x (1.7x, 2.2x outside),
the rope bug 52.2x / 108x. On a copy whose weights are off Q4_1's grid (benchmarks/gguf_presets.py --off-grid 0.1):
10.8x / 6.5x, the norm bug 28.9x (1.16x outside), the rope bug 40.7x."""
_GGUF_Q4_1 = (("kld_mean", 50.0), ("kld_p99", 35.0))
"""gguf-q4_1: SmolLM2's weights are its shipped Q4_1 file dequantized, so there Q4_1 costs 1.27x / 2.63x only; on the
off-grid copy a correct Q4_1 costs 31.2x / 13.8x (margins 1.6x, 2.5x), as llama.cpp's scoreboard puts Q4_1 above
Q4_K_M (2.3x on Llama 3 8B). On SmolLM2 the norm bug (17.1x / 47.9x) and the rope bug (31.1x / 62.8x) fail it by
p99 (1.37x, 1.8x outside); on the off-grid copy no bug measured is outside it, and its traces compare 5 of 96 steps
(its exact KLD is 57x its int8's): the least founded preset (docs/engines.md)."""

PRESETS: dict[str, Budget] = {
    # Relative (docs/fidelity.md, benchmarks/RESULTS.md): multiples of the reference model's own conversion to the
    # precision, measured between the worst correct copy and the mildest realistic bug on SmolLM2-135M-Instruct and
    # the pinned tiny llama. The fixed limits apply to a reference without calibration figures: measured on the tiny
    # llama and the 26M-parameter llama (weight-only int8; "int4" also holds torch's quantize_dynamic there).
    "bf16": Budget(kld_mean=1e-4, kld_p99=3e-3, kld_max=4e-3, name="bf16", ratios=_CAST_RATIOS, precision="bf16"),
    "fp16": Budget(kld_mean=1e-5, kld_p99=2e-4, kld_max=3e-4, name="fp16", ratios=_CAST_RATIOS, precision="fp16"),
    "int8": Budget(kld_mean=2e-4, kld_p99=3e-3, kld_max=4e-3, name="int8", ratios=_QUANT_RATIOS, precision="int8"),
    "int4": Budget(kld_mean=1.5e-1, kld_p90=5e-2, name="int4", ratios=_QUANT_RATIOS, precision="int4"),
    # llama.cpp's GGUF file types, as llama.cpp's own tools make them (convert_hf_to_gguf.py, llama-quantize), run with
    # its f16 KV cache: multiples of the reference's own int8 conversion (docs/engines.md). The fixed limits are the
    # same multiples of SmolLM2-135M-Instruct's int8 (trace bounds: mean 1.38e-3, p99 6.15e-3).
    "gguf-q8_0": Budget(
        kld_mean=5e-3, kld_p99=5e-2, name="gguf-q8_0", ratios=_GGUF_Q8_0, precision="int8", fixed_basis=_GGUF_FIXED
    ),
    "gguf-q6_k": Budget(
        kld_mean=1e-2, kld_p99=1e-1, name="gguf-q6_k", ratios=_GGUF_Q6_K, precision="int8", fixed_basis=_GGUF_FIXED
    ),
    "gguf-q4_k_m": Budget(
        kld_mean=3.5e-2,
        kld_p99=2e-1,
        name="gguf-q4_k_m",
        ratios=_GGUF_Q4_K_M,
        precision="int8",
        fixed_basis=_GGUF_FIXED,
    ),
    "gguf-q4_1": Budget(
        kld_mean=7e-2, kld_p99=2e-1, name="gguf-q4_1", ratios=_GGUF_Q4_1, precision="int8", fixed_basis=_GGUF_FIXED
    ),
}

_KV_FIXED = "measured on SmolLM2-135M-Instruct alone (docs/engines.md)"


def _kv(cache: str, kld_mean: float, kld_p99: float, fixed_basis: str = _KV_FIXED) -> Budget:
    """The preset of an F32 file run with a `cache` KV cache: a cast's ratios to the reference's own copy lossy where
    llama.cpp's arithmetic on float32 weights is (`hf.kv_cache_copies`: the cache, and a tanh GELU's float16 table),
    which llama.cpp's file matches at 0.93-1.02x on the long probe (SmolLM2-135M, Gemma 3 270M); SmolLM2's rms
    epsilon 1e-5 -> 1e-4 costs 17-21x its f16 copy (docs/engines.md). The fixed limits are the same multiples of
    SmolLM2's own copy (the engine tests' trace bounds)."""
    name = f"kv-{cache}"
    return Budget(
        kld_mean=kld_mean,
        kld_p99=kld_p99,
        name=name,
        ratios=_CAST_RATIOS,
        precision=name,
        fixed_basis=fixed_basis,
    )


PRESETS.update(
    {
        "kv-f16": _kv("f16", 1.1e-6, 2.6e-5),
        "kv-f32": _kv("f32", 7e-7, 1.5e-5, "measured on Gemma 3 270M alone (docs/engines.md)"),
        "kv-bf16": _kv("bf16", 3.5e-5, 4.6e-4),
        "kv-q8_0": _kv("q8_0", 2.7e-4, 5e-3),
        "kv-q4_0": _kv("q4_0", 5.2e-2, 0.68),
    }
)

KV_CACHE_PRESETS: dict[str, str] = {
    "f16": "kv-f16",
    "f32": "kv-f32",
    "bf16": "kv-bf16",
    "q8_0": "kv-q8_0",
    "q4_0": "kv-q4_0",
}
"""The preset that judges an F32 GGUF run with each KV cache type: the cache and llama.cpp's float16 GELU table are
its only lossy parts (with an f32 cache only a tanh-GELU model has one; any other is held to the float32 rule)."""

KV_CACHE_TYPES = tuple(KV_CACHE_PRESETS)
"""llama.cpp's KV cache types genguard runs a GGUF with (``--kv-cache``, ``--genguard-gguf-kv-cache``): its default
first."""

GGUF_TYPE_PRESETS: dict[str, str] = {
    "BF16": "bf16",
    "F16": "fp16",
    "Q8_0": "gguf-q8_0",
    "Q6_K": "gguf-q6_k",
    "Q4_K_M": "gguf-q4_k_m",
    "Q4_1": "gguf-q4_1",
}
"""The preset that judges a GGUF of each llama.cpp file type (``general.file_type``) when no budget is named
(``genguard check-gguf``); F32 is judged by the float32 rule, other types need a budget."""
