"""The environment a trace was recorded in: every field that is known to move decoding across machines."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import sys
from typing import TYPE_CHECKING, Any

from pytest_genguard.core.environments import LIBRARY_FIELDS, LOGPROBS_FIELD, SCORES_FIELD
from pytest_genguard.core.jsontext import JSONScalar
from pytest_genguard.hf import offload, tensor_parallel
from pytest_genguard.hf.fingerprint import model_dtype
from pytest_genguard.hf.weights_hash import has_parameters

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


# What torch releases before 2.7 call the scalar kernel set (ATEN_CPU_CAPABILITY=default): one spelling everywhere,
# so a trace, a baseline key or a cache key does not change with the torch release that named the kernels.
_OLD_NAMES = {"NO AVX": "DEFAULT"}


def model_device(model: Any) -> torch.device:
    """Where `model`'s inputs go: for a model accelerate dispatched (a device map, offload) the device its first
    layer computes on (`hf.offload.input_device`), else its parameters' device, else its `device` attribute
    (optimum's ONNX Runtime / OpenVINO models have no parameters), else the CPU."""
    import torch

    if has_parameters(model):
        first: torch.device = next(model.parameters()).device
        dispatched = first.type == "meta" or getattr(model, "hf_device_map", None)
        return (offload.input_device(model) or first) if dispatched else first
    return torch.device(str(getattr(model, "device", "cpu")))


def cpu_capability(torch_mod: Any = None) -> str | None:
    """The SIMD level CPU kernels dispatch to ("DEFAULT", "AVX2", "AVX512", ...; ``ATEN_CPU_CAPABILITY`` picks a lower
    one): it changes CPU reduction order, and what training makes of one recipe."""
    if torch_mod is None:
        import torch as torch_mod
    cpu = getattr(getattr(torch_mod, "backends", None), "cpu", None)
    getter = getattr(cpu, "get_cpu_capability", None)
    if not callable(getter):
        return None
    name = str(getter())
    return _OLD_NAMES.get(name, name)


def cpu_model() -> str:
    """The CPU's model name ("AMD EPYC", "Intel(R) Xeon(R) ..."): two CPUs with the same kernel set still round
    differently (measured: AVX2 on an Intel Xeon and on an AMD EPYC give other logprobs for the same weights, since
    the math libraries pick kernels per processor), so traces are bitwise comparable only on the same model."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def environment(
    model: PreTrainedModel | None = None, device: torch.device | str | None = None, *, torch_mod: Any = None
) -> dict[str, JSONScalar]:
    """The environment fields stored in every trace (python, torch, transformers, device, dtype, kernels, flags)."""
    import torch as real_torch
    import transformers

    t = torch_mod if torch_mod is not None else real_torch
    if device is None and model is not None:
        device = model_device(model)
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
        "cpu_capability": cpu_capability(t),
        "cpu": cpu_model(),
        LOGPROBS_FIELD: "float64",  # how genguard computes logprobs (`hf._generation.Float64LogSoftmax`)
        SCORES_FIELD: "float32",  # processed scores: generate() (and teacher forcing) process float32 logits
    }
    if model is not None:
        fields["dtype"] = model_dtype(model)
        fields["attn_implementation"] = getattr(model.config, "_attn_implementation", None)
        ranks = tensor_parallel.world_size(model)
        if ranks is not None:  # its all-reduces sum in another order than one process: not bitwise comparable
            fields["tensor_parallel"] = ranks
    if dev.type == "cuda":
        fields.update(_cuda_fields(t, dev))
    return fields


def training_libraries() -> dict[str, JSONScalar]:
    """The installed releases of TRL and PEFT (`LIBRARY_FIELDS`), each only where it is importable, read from its
    metadata without importing it: a recorder history's environment, so an upgrade that changes training is named
    where the history changed instead of reading as an unexplained regression."""
    fields: dict[str, JSONScalar] = {}
    for name in LIBRARY_FIELDS:
        if importlib.util.find_spec(name) is None:
            continue
        try:
            fields[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:  # importable without metadata (a source checkout on the path)
            continue
    return fields


def cuda_unavailable_reason(torch_mod: Any) -> str | None:
    """Why CUDA cannot be used (None when it can), in words that name the likely cause."""
    build = getattr(torch_mod.version, "cuda", None)
    if not build:
        return f"torch {torch_mod.__version__} is a CPU-only build (torch.version.cuda is None)"
    if not torch_mod.cuda.is_available():
        return (
            f"torch {torch_mod.__version__} (CUDA {build}) finds no usable CUDA device "
            "(torch.cuda.is_available() is False)"
        )
    if int(torch_mod.cuda.device_count()) < 1:
        return "torch.cuda.device_count() is 0"
    return None
