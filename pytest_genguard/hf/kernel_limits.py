"""What a CPU kernel set cannot run, met with a genguard error instead of torch's traceback.

Checking another CPU with ``ATEN_CPU_CAPABILITY`` (the project's advice for cross-CPU checks) can reach code torch
never runs on its own: torch 2.13's CPU flash attention (SDPA) decides to pack a bfloat16 model's keys for the CPU's
AVX-512 matrix instructions from the CPU itself, then runs the packing kernel of the kernel set in force, whose
AVX2 build has none: ``RuntimeError: pack_vnni2 is only supported when avx512 is supported``, from about 300
tokens on (measured with tiny llama and gemma3 configs, head_dim 64 and 256, on an AMD EPYC with AVX-512). Eager
attention has no such path. `named_failure` turns that error into `KernelSetUnsupported`, naming torch, the kernel
set and the fix; `hf._generation.inference`, which every forward pass of record(), verify(), teacher forcing and
fidelity() runs under, raises it.
"""

from __future__ import annotations

import os
from typing import Any

from pytest_genguard.core.errors import KernelSetUnsupported
from pytest_genguard.hf.environment import cpu_capability

__all__ = ["TORCH_PACK_ERROR", "named_failure"]

TORCH_PACK_ERROR = "pack_vnni2 is only supported when avx512 is supported"
"""torch's message (``TORCH_CHECK`` in ``ATen/cpu/vec/vec_half.h``) when a kernel set without AVX-512 is asked to pack
a bfloat16 or float16 matrix for AVX-512."""


def named_failure(exc: BaseException, model: Any) -> KernelSetUnsupported | None:
    """`KernelSetUnsupported` for torch's error `exc` where it is a kernel set that cannot run `model`'s attention,
    else None (the error is another one: let it through as it is)."""
    if not isinstance(exc, RuntimeError) or TORCH_PACK_ERROR not in str(exc):
        return None
    import torch

    config = getattr(model, "config", None)
    attention = getattr(config, "_attn_implementation", None) or "its default"
    dtype = str(getattr(model, "dtype", "")).removeprefix("torch.") or "bfloat16 or float16"
    forced = os.environ.get("ATEN_CPU_CAPABILITY")
    kernel_set = cpu_capability(torch) or "unknown"
    where = f"ATEN_CPU_CAPABILITY={forced}, torch's {kernel_set} kernels" if forced else f"torch's {kernel_set} kernels"
    return KernelSetUnsupported(
        f"torch {torch.__version__} cannot run this {dtype} model's {attention!s} attention under the CPU kernel set "
        f"in force ({where}): its CPU flash attention packs {dtype} keys for this CPU's AVX-512 instructions, which "
        f"that kernel set cannot do (torch: {TORCH_PACK_ERROR!r}; from about 300 tokens on). Run this model with "
        'eager attention for this run: load it with attn_implementation="eager" (from_pretrained, from_config, '
        'tiny_model), or call model.set_attn_implementation("eager") first; or run under the CPU\'s own kernel set '
        "(ATEN_CPU_CAPABILITY unset)."
    )
