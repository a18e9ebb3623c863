"""The environment a trace was recorded in: every field that is known to move decoding across machines."""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pytest_genguard.core.trace import JSONScalar

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel


def _cuda_fields(torch_mod: Any, device: torch.device) -> dict[str, JSONScalar]:
    """CUDA fields, read through `torch_mod` so tests can pass a fake at the boundary."""
    index = device.index if device.index is not None else torch_mod.cuda.current_device()
    props = torch_mod.cuda.get_device_properties(index)
    major, minor = torch_mod.cuda.get_device_capability(index)
    cudnn = torch_mod.backends.cudnn.version() if torch_mod.backends.cudnn.is_available() else None
    return {
        "cuda": str(torch_mod.version.cuda),
        "cudnn": cudnn,
        "gpu_name": str(props.name),
        "gpu_capability": f"{major}.{minor}",
        "gpu_sm_count": int(props.multi_processor_count),
        "cudnn_deterministic": bool(torch_mod.backends.cudnn.deterministic),
        "cudnn_benchmark": bool(torch_mod.backends.cudnn.benchmark),
        "tf32_matmul": bool(torch_mod.backends.cuda.matmul.allow_tf32),
        "tf32_cudnn": bool(torch_mod.backends.cudnn.allow_tf32),
        "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
    }


def _cpu_capability(torch_mod: Any) -> str | None:
    """The SIMD level CPU kernels dispatch to ("AVX2", "AVX512", ...): it changes CPU reduction order."""
    cpu = getattr(getattr(torch_mod, "backends", None), "cpu", None)
    getter = getattr(cpu, "get_cpu_capability", None)
    return str(getter()) if callable(getter) else None


def environment(
    model: PreTrainedModel | None = None, device: torch.device | str | None = None, *, torch_mod: Any = None
) -> dict[str, JSONScalar]:
    """The environment fields stored in every trace (python, torch, transformers, device, dtype, kernels, flags)."""
    import torch as real_torch
    import transformers

    t = torch_mod if torch_mod is not None else real_torch
    if device is None and model is not None:
        device = next(model.parameters()).device
    dev = real_torch.device(device if device is not None else "cpu")
    fields: dict[str, JSONScalar] = {
        "python": platform.python_version(),
        "platform": f"{sys.platform}-{platform.machine()}",
        "torch": str(t.__version__),
        "transformers": str(transformers.__version__),
        "device": str(dev),
        "device_type": dev.type,
        "num_threads": int(t.get_num_threads()),
        "deterministic_algorithms": bool(t.are_deterministic_algorithms_enabled()),
        "cpu_capability": _cpu_capability(t),
    }
    if model is not None:
        from pytest_genguard.hf.fingerprint import model_dtype

        fields["dtype"] = model_dtype(model)
        fields["attn_implementation"] = getattr(model.config, "_attn_implementation", None)
    if dev.type == "cuda":
        fields.update(_cuda_fields(t, dev))
    return fields


def environment_class(fields: Mapping[str, JSONScalar] | Any) -> str:
    """A short key for environment-keyed baselines: 'cpu-float32', 'cuda-sm90-bfloat16' (device type, GPU
    capability on CUDA, dtype; float32 when the dtype is unknown)."""
    dtype = fields.get("dtype") or "float32"
    if fields.get("device_type") == "cuda":
        cap = str(fields.get("gpu_capability") or "").replace(".", "")
        return f"cuda-sm{cap}-{dtype}"
    return f"{fields.get('device_type') or 'cpu'}-{dtype}"


# Fields that cannot change what a kernel computes: the interpreter, and which of several identical GPUs ran it
# (device_type and the GPU's name, capability and SM count are compared instead of "cuda:0" vs "cuda:1").
NOT_NUMERIC_FIELDS = frozenset({"python", "device"})


def environment_differences(expected: Mapping[str, JSONScalar], actual: Mapping[str, JSONScalar]) -> tuple[str, ...]:
    """The numerically relevant fields whose values differ (a field set on one side only differs)."""
    keys = (set(expected) | set(actual)) - NOT_NUMERIC_FIELDS
    return tuple(sorted(k for k in keys if k not in expected or k not in actual or not _same(expected[k], actual[k])))


def same_environment(expected: Mapping[str, JSONScalar], actual: Mapping[str, JSONScalar]) -> bool:
    """Whether two traces come from the same environment, where deterministic decoding is bitwise reproducible.

    Same environment = both environments recorded (non-empty), the same environment class, and every field except
    `python` and the device index equal: torch, transformers, platform, CPU capability, thread count, dtype,
    attention implementation, deterministic flags and, on CUDA, the CUDA/cuDNN versions, GPU name, capability, SM
    count, TF32 and cuBLAS workspace settings. Anything unknown counts as different, so the tolerant rule applies.
    """
    if not expected or not actual:
        return False
    if environment_class(expected) != environment_class(actual):
        return False
    return not environment_differences(expected, actual)


def _same(a: JSONScalar, b: JSONScalar) -> bool:
    return type(a) is type(b) and a == b
