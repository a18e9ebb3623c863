"""What a trace's environment fields say: its environment class (the key of per-environment baselines) and whether
two traces come from the same environment (where decoding is bitwise reproducible). Standard library only: the
fields themselves are collected by `pytest_genguard.hf.environment`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_genguard.core.jsontext import JSONScalar

__all__ = [
    "LOGPROBS_FIELD",
    "NOT_NUMERIC_FIELDS",
    "environment_class",
    "environment_differences",
    "logprobs_epsilon",
    "same_environment",
]

LOGPROBS_FIELD = "logprobs"
"""The environment field that says in which dtype genguard computed the logprobs: "float64" since pytest-genguard
0.2; absent in traces of 0.1, which computed them in float32."""


def logprobs_epsilon(fields: Mapping[str, JSONScalar]) -> float:
    """The machine epsilon of the dtype the trace's logprobs were computed in (float32's for a trace that does not
    say): the unit of their rounding, at the scale of each step's log-sum-exp."""
    return 2.0**-52 if fields.get(LOGPROBS_FIELD) == "float64" else 2.0**-23


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
