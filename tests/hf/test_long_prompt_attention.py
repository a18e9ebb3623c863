"""A bfloat16 model's attention over a prompt past 300 tokens, under another CPU kernel set: torch 2.13's SDPA raises
``pack_vnni2 is only supported when avx512 is supported`` under ``ATEN_CPU_CAPABILITY=avx2`` on a CPU with AVX-512;
genguard meets it with `KernelSetUnsupported`, naming torch, the kernel set and the fix (eager attention), and eager
attention runs (`pytest_genguard.hf.kernel_limits`; the cases in `tests/support/long_attention.py`).

.ci/run's kernel-set legs run this module under each kernel set, so a long bf16 prompt stays covered on each."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import kernel_sets
import long_attention
import pytest

import pytest_genguard as gg
from pytest_genguard.hf.environment import cpu_capability
from pytest_genguard.hf.kernel_limits import TORCH_PACK_ERROR, named_failure

ROOT = Path(__file__).resolve().parents[2]
FIX = ('attn_implementation="eager"', 'model.set_attn_implementation("eager")')


def is_named(outcome: str, kernel_set: str) -> bool:
    """Whether `outcome` is genguard's error for a kernel set that cannot run the attention, saying what to do."""
    return (
        outcome.startswith("KernelSetUnsupported: torch 2.")
        and f"torch's {kernel_set} kernels" in outcome
        and all(fix in outcome for fix in FIX)
        and TORCH_PACK_ERROR in outcome
    )


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return gg.tiny_tokenizer()


@pytest.fixture(scope="module")
def reference(tokenizer: Any) -> gg.GenerationTrace:
    return gg.record(long_attention.model("eager"), tokenizer, long_attention.prompt(tokenizer), max_new_tokens=2)


def test_a_bf16_model_over_a_long_prompt_under_this_kernel_set(
    tokenizer: Any, reference: gg.GenerationTrace, one_thread: None
) -> None:
    # Under the kernel set this process runs (each of .ci/run's legs sets one): eager attention runs; SDPA runs, or
    # meets a CPU and kernel set torch cannot run it on with genguard's error, never torch's traceback.
    kernel_set = str(cpu_capability())
    assert set(long_attention.outcomes(long_attention.model("eager"), tokenizer, reference).values()) == {"ok"}
    sdpa = long_attention.outcomes(long_attention.model("sdpa"), tokenizer, reference)
    assert all(o == "ok" or is_named(o, kernel_set) for o in sdpa.values()), (
        f"ATEN_CPU_CAPABILITY={os.environ.get('ATEN_CPU_CAPABILITY')}",
        sdpa,
    )


def test_torchs_error_is_named_and_any_other_passes_through(
    tokenizer: Any, reference: gg.GenerationTrace, one_thread: None
) -> None:
    sdpa = long_attention.model("sdpa")
    with long_attention.torch_pack_failure():
        named = long_attention.outcomes(sdpa, tokenizer, reference)
    assert all(o.startswith("KernelSetUnsupported: ") and all(f in o for f in FIX) for o in named.values()), named
    # Negative control: another error of torch's attention is not renamed.
    other = RuntimeError("Expected query, key, and value to have the same dtype")
    assert named_failure(other, sdpa) is None and named_failure(ValueError(TORCH_PACK_ERROR), sdpa) is None
    assert isinstance(named_failure(RuntimeError(TORCH_PACK_ERROR), sdpa), gg.KernelSetUnsupported)


@pytest.mark.parametrize("kernel_set", kernel_sets.params("avx2"))
def test_under_avx2_torchs_failure_is_named_and_eager_attention_runs(kernel_set: str) -> None:
    # torch reads ATEN_CPU_CAPABILITY at start-up: a fresh interpreter under AVX2. Where this CPU has AVX-512, torch's
    # own SDPA fails there and the error is genguard's; elsewhere SDPA runs, and torch's message (raised by SDPA as
    # it raises it on such a CPU) is named all the same.
    env = {**os.environ, "ATEN_CPU_CAPABILITY": kernel_set, "OMP_NUM_THREADS": "1"}
    script = ROOT / "tests" / "support" / "long_attention.py"
    done = subprocess.run(
        [sys.executable, str(script)], env=env, cwd=ROOT, capture_output=True, text=True, check=False, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["kernel_set"] == "AVX2"
    assert set(found["eager"].values()) == {"ok"}, found["eager"]
    assert all(is_named(o, "AVX2") and "ATEN_CPU_CAPABILITY=avx2" in o for o in found["torch_failure"].values())
    assert all(o == "ok" or is_named(o, "AVX2") for o in found["sdpa"].values()), found["sdpa"]
