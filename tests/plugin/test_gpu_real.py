"""GPU mode on a real CUDA device. Every test here is marked `genguard_gpu`: it runs only with `--genguard-gpu` (the
run stops with a usage error when no CUDA device is usable) and is skipped with that reason otherwise. Nothing here
is faked; the CPU-side coverage of the same machinery is in test_gpu_mode.py and test_cross_environment.py.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch

from pytest_genguard.core.compare import compare
from pytest_genguard.core.environments import environment_differences, same_environment
from pytest_genguard.core.tolerances import BFLOAT16, EXACT
from pytest_genguard.core.trace import GenerationTrace
from pytest_genguard.core.verdict import Verdict
from pytest_genguard.hf.finetune import FineTuned
from pytest_genguard.hf.record import record
from pytest_genguard.hf.tiny import probe_prompts
from pytest_genguard.plugin.reference import prompt_outcomes, reference_tolerances

pytestmark = pytest.mark.genguard_gpu

RUNS = 5


@pytest.fixture(scope="module")
def tuned(genguard_finetune: Callable[..., FineTuned], genguard_device: torch.device) -> FineTuned:
    ft = genguard_finetune("llama", pinned=False)  # compared with its own CPU decoding in this run
    assert next(ft.model.parameters()).device == genguard_device  # the fixture put it on this worker's GPU
    return ft


def _record(tuned: FineTuned, model: torch.nn.Module | None = None) -> GenerationTrace:
    chosen = tuned.model if model is None else model
    return record(chosen, tuned.tokenizer, probe_prompts(), max_new_tokens=16, top_k=5)


def test_genguard_device_is_this_workers_gpu_in_deterministic_mode(genguard_device: torch.device) -> None:
    assert genguard_device.type == "cuda"
    assert genguard_device.index is not None and genguard_device.index < torch.cuda.device_count()
    assert torch.are_deterministic_algorithms_enabled()
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
    assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32


def test_a_cuda_trace_matches_the_cpu_trace_under_the_tolerant_rule(tuned: FineTuned) -> None:
    cuda = _record(tuned)
    cpu = _record(tuned, copy.deepcopy(tuned.model).to("cpu"))
    assert cuda.environment["device_type"] == "cuda" and cpu.environment["device_type"] == "cpu"
    assert "device_type" in environment_differences(cpu.environment, cuda.environment)
    cmp = compare(cpu, cuda, tolerances=reference_tolerances(cpu, cuda))
    print("\ncpu vs cuda:", [o.describe() for o in prompt_outcomes(cmp)])
    assert cmp.ok, str(cmp)
    assert [p.token_ids for p in cuda] == [p.token_ids for p in cpu]  # sharp fine-tuned answers do not flip


def test_deterministic_mode_gives_one_unique_output_in_five_cuda_runs(tuned: FineTuned) -> None:
    traces = [_record(tuned) for _ in range(RUNS)]
    unique = {t.to_json() for t in traces}
    print(f"\n{RUNS} runs on {traces[0].environment['gpu_name']}: {len(unique)} unique trace(s)")
    assert len(unique) == 1
    assert same_environment(traces[0].environment, traces[-1].environment)
    assert compare(traces[0], traces[-1], tolerances=reference_tolerances(traces[0], traces[-1])).verdict is (
        Verdict.IDENTICAL
    )
    assert reference_tolerances(traces[0], traces[-1]) == EXACT


def test_bf16_on_cuda_keeps_the_sharp_paths_of_fp32_within_the_bf16_rule(tuned: FineTuned) -> None:
    fp32 = _record(tuned)
    bf16 = _record(tuned, copy.deepcopy(tuned.model).to(torch.bfloat16))
    assert bf16.environment["dtype"] == "bfloat16" and bf16.environment["device_type"] == "cuda"
    cmp = compare(fp32, bf16)  # dtype is an environment axis: the cast's new weight bytes do not make it stale
    assert cmp.tolerances == BFLOAT16
    print("\nfp32 vs bf16 on cuda:", [o.describe() for o in prompt_outcomes(cmp)])
    assert [p.token_ids for p in bf16] == [p.token_ids for p in fp32]


def test_the_gpu_run_shows_the_device_and_flags_and_runs_gpu_tests_on_each_workers_gpu(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        """
        import os
        import pytest
        import torch

        @pytest.mark.genguard_gpu
        @pytest.mark.parametrize("i", range(4))
        def test_on_cuda(genguard_device, i):
            worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:])
            assert genguard_device == torch.device("cuda", worker % torch.cuda.device_count())
            assert os.environ["CUBLAS_WORKSPACE_CONFIG"] in (":4096:8", ":16:8")
            assert torch.are_deterministic_algorithms_enabled()
        """
    )
    for xdist in ([], ["-n", "2"]):
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--genguard-gpu", *xdist)
        result.assert_outcomes(passed=4)
        result.stdout.fnmatch_lines(
            [
                "genguard: device cuda:0 (*, sm*, * SMs), torch *, CUDA *, cuDNN *",
                "genguard: deterministic mode: use_deterministic_algorithms=True, CUBLAS_WORKSPACE_CONFIG=*, "
                "cudnn.deterministic=True, cudnn.benchmark=False, TF32 matmul=False cudnn=False",
            ]
        )
