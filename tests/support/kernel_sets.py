"""The CPU kernel sets torch can be made to use (``ATEN_CPU_CAPABILITY``, read at start-up): running a subprocess
under another one is how one machine tests what another CPU would compute."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# The CPU flags torch's dispatcher needs for each kernel set (aten/src/ATen/native/DispatchStub.cpp).
_NEEDS = {"default": set(), "avx2": {"avx2", "fma"}, "avx512": {"avx512f", "avx512bw", "avx512vl", "avx512dq"}}


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def supported(kernel_set: str) -> bool:
    """Whether this CPU can run `kernel_set` (forcing AVX-512 on a CPU without it dies of SIGILL)."""
    return _NEEDS[kernel_set] <= _cpu_flags()


def params(*kernel_sets: str) -> list[object]:
    """`pytest.param`s for the kernel sets, each skipped with a reason where this CPU cannot run it."""
    return [
        pytest.param(
            k, id=k, marks=pytest.mark.skipif(not supported(k), reason=f"this CPU cannot run the {k} kernel set")
        )
        for k in kernel_sets
    ]


def missing(kernel_set: str) -> list[str]:
    """The CPU flags `kernel_set` needs that this CPU lacks (what .ci/run prints for a leg it cannot run)."""
    return sorted(_NEEDS[kernel_set] - _cpu_flags())


if __name__ == "__main__":  # .ci/run: the kernel sets this CPU can run, one per line; --missing SET: the flags it lacks
    if sys.argv[1:2] == ["--missing"]:
        print(" ".join(missing(sys.argv[2])) or "(none)")
    else:
        print("\n".join(k for k in _NEEDS if supported(k)))
