"""A reference copy lossy where llama.cpp's float32 arithmetic is, its weights untouched: its attention computed as
llama.cpp computes it over a KV cache of a given type (f32, f16, bf16, q8_0, q4_0), and a tanh GELU through ggml's
float16 table. What that copy costs along a trace's paths, or the long probe, is the calibration of a file whose
weights are float32 but whose computation is not (``kv-f16``: an F32 GGUF under llama.cpp's default cache): a budget
for the copy at hand, not for a whole-model cast, which costs SmolLM2-135M 30x more (an fp16 cast 1.9e-5 KLD, its F32
file under the f16 cache 6e-7).

What llama.cpp rounds (its CPU kernels, vendored in llama-cpp-python 0.3.36, ``ggml/src/ggml-cpu``): every key and
value as stored in the cache (after the rope and any key norm); and since a matrix product there takes its second
operand in the first's "vec_dot" type, the queries too, and, without flash attention (llama-cpp-python's default),
the attention weights before they meet the values (`ggml_mul_mat(v, kq)`). A quantized cache (q8_0, q4_0) needs
flash attention: its kernel quantizes the queries to q8_0, keeps the weights in float32 and reads each value row
back to float32; and, where the head dimension is a multiple of 64, llama.cpp turns the queries and keys by an
orthonormal Walsh-Hadamard matrix (the largest power of two dividing the head dimension) and the values by one of 64
(turned back after the product) before they are quantized, which spreads outliers across each block
(``llama-kv-cache.cpp``, ``attn_rot_k``/``attn_rot_v``). Products accumulate in float32 on both sides, as here. The
scales of q8_0 and q4_0 blocks (32 values along the head dimension) are stored as float16, as ggml stores them.

ggml's CPU GELU (``ggml_vec_gelu_f32``, ``ggml_vec_geglu_f32``: ``GGML_GELU_FP16``) rounds its input to float16 and
reads the output from a float16 table of the tanh form; a model whose MLP uses the tanh GELU (Gemma's
``gelu_pytorch_tanh``, GPT-2's ``gelu_new``) is rounded there even with an f32 cache (`tabled_activation`): its
copy for an f32 cache, ``kv-f32``, rounds that alone.

Measured on the long probe (2,047 positions, exact), llama.cpp's F32 file against this copy, mean KLD: SmolLM2-135M
(SiLU) f16 3.36e-6 / 3.39e-6, bf16 2.13e-4 / 2.18e-4, q8_0 8.94e-4 / 8.98e-4, q4_0 0.145 / 0.134; Gemma 3 270M (tanh
GELU) f32 2.43e-6 / 2.41e-6, f16 5.67e-6 / 5.74e-6 (docs/engines.md, "A budget for the copy at hand").
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel

__all__ = [
    "CACHE_TYPES",
    "KV_PREFIX",
    "TABLED_GELUS",
    "CacheRounding",
    "as_kv_cache",
    "kv_cache_copy",
    "rounded",
    "tabled_activation",
]

KV_PREFIX = "kv-"
"""A KV-cache precision's prefix: ``kv-f16`` is the cache type ``f16``."""
BLOCK = 32
"""Values per q8_0 / q4_0 block (ggml's QK8_0, QK4_0)."""


@dataclass(frozen=True)
class CacheRounding:
    """How llama.cpp's attention rounds over a cache of one type: the keys and values (`stored`), the queries (`dot`:
    the products' operand type), and whether the attention weights are rounded to `stored` before the values
    (`weights`)."""

    stored: str
    dot: str
    weights: bool
    flash_attention: bool

    @property
    def rotated(self) -> bool:
        """Whether llama.cpp turns queries, keys and values by a Hadamard matrix first (a quantized cache)."""
        return self.stored not in ("f32", "f16", "bf16")


CACHE_TYPES: dict[str, CacheRounding] = {
    "f32": CacheRounding("f32", "f32", weights=False, flash_attention=False),
    "f16": CacheRounding("f16", "f16", weights=True, flash_attention=False),
    "bf16": CacheRounding("bf16", "bf16", weights=True, flash_attention=False),
    "q8_0": CacheRounding("q8_0", "q8_0", weights=False, flash_attention=True),
    "q4_0": CacheRounding("q4_0", "q8_0", weights=False, flash_attention=True),
}
"""llama.cpp's KV cache types a copy is made for (llama-cpp-python's `type_k`/`type_v`; f32 rounds nothing)."""


def _ggml_round(x: torch.Tensor) -> torch.Tensor:
    """C's ``roundf``: half away from zero (torch.round rounds half to even)."""
    import torch

    return torch.sign(x) * torch.floor(x.abs() + 0.5)


def _blocks(x: torch.Tensor) -> torch.Tensor:
    if x.shape[-1] % BLOCK:
        raise ValueError(f"a quantized KV cache needs a head dimension divisible by {BLOCK}, got {x.shape[-1]}")
    return x.reshape(*x.shape[:-1], x.shape[-1] // BLOCK, BLOCK)


def rounded(x: torch.Tensor, kind: str) -> torch.Tensor:
    """`x` (float32) as llama.cpp stores it in type `kind` and reads it back: f32 (as is), f16, bf16, q8_0 or q4_0
    (ggml's ``quantize_row_q8_0_ref`` / ``quantize_row_q4_0_ref``, blocks of 32 along the last dimension, float16
    scales)."""
    import torch

    if kind == "f32":
        return x
    if kind == "f16":
        return x.to(torch.float16).to(x.dtype)
    if kind == "bf16":
        return x.to(torch.bfloat16).to(x.dtype)
    blocks = _blocks(x.float())
    if kind == "q8_0":
        d = blocks.abs().amax(dim=-1, keepdim=True) / 127
        inverse = torch.where(d > 0, 1 / d, torch.zeros_like(d))
        codes = _ggml_round(blocks * inverse)
    elif kind == "q4_0":
        where = blocks.abs().argmax(dim=-1, keepdim=True)
        d = blocks.gather(-1, where) / -8
        inverse = torch.where(d != 0, 1 / d, torch.zeros_like(d))
        codes = torch.clamp(torch.trunc(blocks * inverse + 8.5), max=15) - 8
    else:
        raise ValueError(f"unknown KV cache type {kind!r}; known: f32, f16, bf16, q8_0, q4_0")
    scale = d.to(torch.float16).float()
    return (codes * scale).reshape(x.shape).to(x.dtype)


@functools.cache
def _hadamard(n: int) -> torch.Tensor:
    """ggml's orthonormal Walsh-Hadamard matrix of size `n` (Sylvester's order; symmetric, its own inverse)."""
    import torch

    h = torch.full((1, 1), n**-0.5)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h


def _turned(x: torch.Tensor, n: int) -> torch.Tensor:
    """`x` with each run of `n` values along its last dimension multiplied by `_hadamard(n)`."""
    shape = x.shape
    return (x.reshape(*shape[:-1], shape[-1] // n, n) @ _hadamard(n).to(x.dtype)).reshape(shape)


def _rotations(head_dim: int) -> tuple[int, int] | None:
    """llama.cpp's Hadamard sizes (keys and queries, values) for a quantized cache, or None: the keys' is the largest
    power of two from 64 that divides the head dimension, the values' 64; none when 64 does not divide it."""
    if head_dim % 64:
        return None
    n = 64
    while head_dim % (2 * n) == 0:
        n *= 2
    return n, 64


def _attention(rounding: CacheRounding) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """transformers' eager attention with llama.cpp's rounding over a `rounding.stored` cache."""
    import torch

    def attention(
        module: Any,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: torch.Tensor | None,
        dropout: float = 0.0,
        scaling: float | None = None,
        softcap: float | None = None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        unknown = {"sinks", "s_aux"} & set(kwargs)
        if unknown:
            raise NotImplementedError(
                f"genguard's KV cache copy does not model attention with {', '.join(sorted(unknown))}; judge this "
                "model's file with an explicit budget"
            )
        groups = query.shape[1] // key.shape[1]
        turns = _rotations(query.shape[-1]) if rounding.rotated else None
        if turns is not None:
            query, key, value = _turned(query, turns[0]), _turned(key, turns[0]), _turned(value, turns[1])
        q = rounded(query, rounding.dot)
        k = rounded(key, rounding.stored).repeat_interleave(groups, dim=1)
        v = rounded(value, rounding.stored).repeat_interleave(groups, dim=1)
        scale = module.head_dim**-0.5 if scaling is None else scaling
        weights = torch.matmul(q, k.transpose(2, 3)) * scale
        if softcap is not None:
            weights = torch.tanh(weights / softcap) * softcap
        if attention_mask is not None:
            weights = weights + attention_mask
        weights = torch.softmax(weights, dim=-1, dtype=torch.float32).to(query.dtype)
        if rounding.weights:
            weights = rounded(weights, rounding.stored)
        out = torch.matmul(weights, v)
        if turns is not None:
            out = _turned(out, turns[1])
        return out.transpose(1, 2).contiguous(), weights

    return attention


@functools.cache
def _registered(kind: str) -> str:
    """The attention implementation's name for cache type `kind`, registered once with transformers (its attention
    function and, for the masks, eager attention's)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    name = f"genguard_kv_{kind}"
    AttentionInterface.register(name, _attention(CACHE_TYPES[kind]))
    AttentionMaskInterface.register(name, eager_mask)
    return name


TABLED_GELUS = ("gelu_pytorch_tanh", "gelu_python_tanh", "gelu_new", "gelu_fast")
"""transformers' names of the tanh GELU (a config's ``hidden_act`` / ``hidden_activation``), which llama.cpp computes
through ggml's float16 table."""


def _gelu_table(x: torch.Tensor) -> torch.Tensor:
    """ggml's ``ggml_vec_gelu_f32``: 0 at or below -10, x at or above 10, else the tanh GELU of x rounded to float16,
    itself rounded to float16 (its table)."""
    import torch

    half = x.to(torch.float16).float()
    table = torch.nn.functional.gelu(half, approximate="tanh").to(torch.float16).to(x.dtype)
    return torch.where(x <= -10, torch.zeros_like(x), torch.where(x >= 10, x, table))


def tabled_activation(config: Any) -> bool:
    """Whether the model of `config` uses an activation llama.cpp rounds through ggml's float16 GELU table
    (`TABLED_GELUS`): then its F32 file is lossy even with an f32 cache."""
    text = _sub_configs(config)[0] if _sub_configs(config) else config
    names = (getattr(text, "hidden_activation", None), getattr(text, "hidden_act", None))
    return any(name in TABLED_GELUS for name in names)


@functools.cache
def _tabled_classes() -> tuple[type, ...]:
    from transformers.activations import ACT2FN

    return tuple({type(ACT2FN[name]) for name in TABLED_GELUS})


def kv_cache_copy(model: PreTrainedModel, kind: str) -> PreTrainedModel:
    """A copy of `model` computed as llama.cpp computes its F32 file with a `kind` KV cache (`CACHE_TYPES`): its
    attention over that cache, its tanh GELU through ggml's float16 table; the weights are the model's own, in
    float32."""
    import torch

    return as_kv_cache(copy.deepcopy(model).to(torch.float32), kind)


def as_kv_cache(out: PreTrainedModel, kind: str) -> PreTrainedModel:
    """`out` (a float32 copy the caller made: `hf.reference_copies` makes an offloaded model's its own way) made to
    compute as `kv_cache_copy` says, in place; returned."""
    if kind not in CACHE_TYPES:
        raise ValueError(f"kv_cache_copy: unknown KV cache type {kind!r}; known: {', '.join(CACHE_TYPES)}")
    name = _registered(kind)
    for config in {id(c): c for c in (out.config, *_sub_configs(out.config))}.values():
        config._attn_implementation = name
    tabled = _tabled_classes()
    for parent in list(out.modules()):
        for child_name, child in list(parent.named_children()):
            if isinstance(child, tabled):
                setattr(parent, child_name, _gelu_class()())
    return out


@functools.cache
def _gelu_class() -> type:
    """ggml's float16 GELU table as a torch module (`_gelu_table`), the class made at first use: importing this module
    loads no torch."""
    import torch

    class GeluTable(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return _gelu_table(x)

    return GeluTable


def _sub_configs(config: Any) -> list[Any]:
    getter = getattr(config, "get_text_config", None)
    text = getter() if callable(getter) else None
    return [text] if text is not None and text is not config else []
