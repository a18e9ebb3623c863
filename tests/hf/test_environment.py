"""environment(): the fields every trace carries; environment_class(); what "the same environment" means."""

from __future__ import annotations

import platform
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import transformers
from fake_torch import FakeTorch

from pytest_genguard.core.environments import environment_class, environment_differences, same_environment
from pytest_genguard.hf.environment import cpu_capability, environment
from pytest_genguard.hf.record import record
from pytest_genguard.hf.tiny import tiny_model, tiny_tokenizer

CUDA_FIELDS = {
    "cuda",
    "cudnn",
    "gpu_name",
    "gpu_capability",
    "gpu_sm_count",
    "cudnn_deterministic",
    "cudnn_benchmark",
    "tf32_matmul",
    "tf32_cudnn",
    "cublas_workspace_config",
}


@pytest.fixture(scope="module")
def model() -> Any:
    return tiny_model("gpt2", attn_implementation="eager")


def test_environment_on_cpu_has_the_versions_device_dtype_kernels_threads_and_flags(model: Any) -> None:
    env = environment(model)
    assert env["python"] == platform.python_version()
    assert env["torch"] == torch.__version__
    assert env["transformers"] == transformers.__version__
    assert (env["device"], env["device_type"]) == ("cpu", "cpu")
    assert env["dtype"] == "float32"
    assert env["attn_implementation"] == "eager"
    assert env["num_threads"] == torch.get_num_threads()
    assert env["deterministic_algorithms"] == torch.are_deterministic_algorithms_enabled()
    assert env["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert not CUDA_FIELDS & set(env)


def test_environment_follows_thread_count_dtype_and_attention_implementation() -> None:
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        bf16 = tiny_model("llama", dtype="bfloat16", attn_implementation="sdpa")
        env = environment(bf16)
    finally:
        torch.set_num_threads(old)
    assert (env["num_threads"], env["dtype"], env["attn_implementation"]) == (1, "bfloat16", "sdpa")


def test_the_cuda_branch_reads_versions_gpu_and_flags_through_the_torch_module(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    fake = FakeTorch(name="NVIDIA A100-SXM4-80GB", capability=(8, 0), sm_count=108, cudnn_version=90100)
    fake.backends.cudnn.deterministic = True
    fake.backends.cuda.matmul.allow_tf32 = False
    env = environment(None, "cuda:1", torch_mod=fake)
    assert env["device"] == "cuda:1"
    assert env["torch"] == "2.13.0+cu126"
    assert {k: env[k] for k in CUDA_FIELDS} == {
        "cuda": "12.6",
        "cudnn": 90100,
        "gpu_name": "NVIDIA A100-SXM4-80GB",
        "gpu_capability": "8.0",
        "gpu_sm_count": 108,
        "cudnn_deterministic": True,
        "cudnn_benchmark": True,
        "tf32_matmul": False,
        "tf32_cudnn": True,
        "cublas_workspace_config": ":4096:8",
    }
    assert environment_class({**env, "dtype": "bfloat16"}) == f"cuda{env['cuda']}-sm80-bfloat16"


def test_the_cuda_branch_uses_the_current_device_when_none_is_named() -> None:
    fake = FakeTorch(devices=2)
    fake.cuda.set_device(1)
    env = environment(None, "cuda", torch_mod=fake)
    assert env["device"] == "cuda" and env["gpu_name"] == "NVIDIA H200"
    assert "cuda.get_device_properties(1)" in fake.log


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"device_type": "cpu", "dtype": "float32"}, "cpu-float32"),
        ({"device_type": "cpu", "dtype": "bfloat16"}, "cpu-bfloat16"),
        ({"device_type": "cuda", "gpu_capability": "9.0", "dtype": "bfloat16"}, "cuda-sm90-bfloat16"),
        ({"device_type": "cuda", "gpu_capability": "8.6", "dtype": "float16"}, "cuda-sm86-float16"),
        # The toolkit torch was built for: a CUDA 13 build's cuBLAS does not give a CUDA 12.6 build's logits.
        (
            {"device_type": "cuda", "gpu_capability": "9.0", "cuda": "12.6", "dtype": "bfloat16"},
            "cuda12.6-sm90-bfloat16",
        ),
        (
            {"device_type": "cuda", "gpu_capability": "9.0", "cuda": "13.0", "dtype": "bfloat16"},
            "cuda13.0-sm90-bfloat16",
        ),
        ({"device_type": "cuda", "gpu_capability": "9.0", "cuda": "None", "dtype": "float32"}, "cuda-sm90-float32"),
        ({"device_type": "cpu"}, "cpu-float32"),
        ({}, "cpu-float32"),
    ],
)
def test_environment_class_is_device_type_toolkit_capability_and_dtype(fields: dict[str, Any], expected: str) -> None:
    assert environment_class(fields) == expected


def test_record_stores_the_environment_in_the_trace(model: Any) -> None:
    trace = record(model, tiny_tokenizer(), "the quick", max_new_tokens=2, top_k=2)
    assert dict(trace.environment) == environment(model)


BASE = {
    "python": "3.11.7",
    "torch": "2.13.0",
    "device": "cuda:0",
    "device_type": "cuda",
    "gpu_capability": "9.0",
    "gpu_name": "NVIDIA H200",
    "num_threads": 2,
    "dtype": "float32",
    "deterministic_algorithms": True,
}


def test_same_environment_ignores_only_the_python_version_and_the_gpu_index() -> None:
    other = {**BASE, "python": "3.12.1", "device": "cuda:3"}
    assert same_environment(BASE, other)
    assert environment_differences(BASE, other) == ()


@pytest.mark.parametrize(
    "change",
    [
        {"num_threads": 1},
        {"torch": "2.12.0"},
        {"dtype": "bfloat16"},
        {"gpu_capability": "8.0"},
        {"gpu_name": "NVIDIA H100"},
        {"deterministic_algorithms": False},
        {"deterministic_algorithms": 1},  # same value to ==, different type: not the same record
        {"attn_implementation": "sdpa"},  # a field one side does not have
    ],
    ids=str,
)
def test_any_other_difference_makes_environments_different(change: dict[str, Any]) -> None:
    other = {**BASE, **change}
    assert not same_environment(BASE, other)
    assert environment_differences(BASE, other) == tuple(change)


def test_unrecorded_environments_are_never_the_same() -> None:
    assert not same_environment({}, {})
    assert not same_environment(BASE, {})


def test_the_scalar_kernel_set_has_one_name_on_every_torch_release() -> None:
    def fake(name: str) -> Any:
        return SimpleNamespace(backends=SimpleNamespace(cpu=SimpleNamespace(get_cpu_capability=lambda: name)))

    # torch < 2.7 calls ATEN_CPU_CAPABILITY=default "NO AVX", later releases "DEFAULT": one spelling in every trace.
    assert cpu_capability(fake("NO AVX")) == cpu_capability(fake("DEFAULT")) == "DEFAULT"
    assert cpu_capability(fake("AVX2")) == "AVX2"  # other kernel sets keep their names
    assert cpu_capability(SimpleNamespace(backends=SimpleNamespace())) is None  # a torch that cannot say
