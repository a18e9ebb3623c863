"""GPU mode's CUDA branches on CPU: deterministic setup, the CUDA check, the worker -> GPU mapping, the header.

torch is replaced by `FakeTorch` at the boundary (the `torch_mod` parameter); what needs a real GPU is in
tests/plugin/test_gpu_real.py. The no-CUDA usage error is checked for real, in a subprocess that sees no CUDA device.
"""

from __future__ import annotations

import pytest
import torch  # imported here, not inside a test: pytester's in-process runs must not re-import it
from fake_torch import FakeTorch

from pytest_genguard.plugin import gpu
from pytest_genguard.plugin.settings import SETTINGS_KEY, settings_from_config

FLAGS_SET = [
    "use_deterministic_algorithms=True",
    "cudnn.deterministic=True",
    "cudnn.benchmark=False",
    "matmul.allow_tf32=False",
    "cudnn.allow_tf32=False",
]


def test_determinism_setup_sets_the_workspace_variable_and_every_flag() -> None:
    env: dict[str, str] = {}
    fake = FakeTorch(environ=env)
    flags = gpu.setup_determinism(fake, env)
    assert env["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert fake.log == FLAGS_SET
    assert flags == gpu.Determinism(
        cublas_workspace_config=":4096:8",
        cublas_config_set_by_genguard=True,
        deterministic_algorithms=True,
        cudnn_deterministic=True,
        cudnn_benchmark=False,
        tf32_matmul=False,
        tf32_cudnn=False,
        cuda_initialized_before=False,
    )


def test_determinism_setup_keeps_a_deterministic_workspace_setting_the_user_chose() -> None:
    env = {"CUBLAS_WORKSPACE_CONFIG": ":16:8"}
    flags = gpu.setup_determinism(FakeTorch(environ=env), env)
    assert env["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"
    assert flags.cublas_workspace_config == ":16:8"
    assert not flags.cublas_config_set_by_genguard


def test_a_non_deterministic_workspace_setting_is_a_usage_error_not_overwritten() -> None:
    env = {"CUBLAS_WORKSPACE_CONFIG": ":0:0"}
    fake = FakeTorch(environ=env)
    with pytest.raises(pytest.UsageError, match=r"CUBLAS_WORKSPACE_CONFIG=':0:0' is not deterministic.*:4096:8"):
        gpu.setup_determinism(fake, env)
    assert env["CUBLAS_WORKSPACE_CONFIG"] == ":0:0"
    assert fake.log == []


def test_the_flags_reported_are_read_back_from_torch_not_assumed() -> None:
    env: dict[str, str] = {}
    flags = gpu.setup_determinism(FakeTorch(environ=env, frozen_flags=True), env)
    assert flags.deterministic_algorithms is False
    assert flags.cudnn_benchmark is True
    assert flags.tf32_matmul is True
    assert "TF32 matmul=True" in flags.describe()


def test_determinism_setup_notes_when_cuda_was_initialised_before_it() -> None:
    env: dict[str, str] = {}
    fake = FakeTorch(environ=env)
    fake.cuda.set_device(0)
    assert gpu.setup_determinism(fake, env).cuda_initialized_before is True


@pytest.mark.parametrize(
    ("worker", "devices", "expected"),
    [(0, 1, 0), (1, 1, 0), (1, 2, 1), (2, 2, 0), (3, 2, 1), (5, 8, 5), (9, 8, 1)],
)
def test_xdist_workers_take_the_gpus_round_robin(worker: int, devices: int, expected: int) -> None:
    assert gpu.gpu_for_worker(worker, devices) == expected


def test_the_worker_mapping_rejects_no_devices_and_negative_workers() -> None:
    with pytest.raises(ValueError, match="device_count must be >= 1"):
        gpu.gpu_for_worker(0, 0)
    with pytest.raises(ValueError, match="worker_index must be >= 0"):
        gpu.gpu_for_worker(-1, 2)


def test_gpu_start_sets_determinism_up_before_cuda_initialises_and_picks_the_workers_gpu() -> None:
    env: dict[str, str] = {}
    fake = FakeTorch(devices=2, environ=env)
    setup = gpu.prepare_gpu(fake, worker_index=3, environ=env)
    assert setup.device == "cuda:1"
    assert (setup.index, setup.device_count, setup.worker) == (1, 2, 3)
    assert (setup.name, setup.capability, setup.sm_count) == ("NVIDIA H200", "9.0", 132)
    assert (setup.cuda_version, setup.cudnn_version) == ("12.6", 90100)
    init = next(i for i, line in enumerate(fake.log) if line.startswith("cuda initialised"))
    assert fake.log[init] == "cuda initialised by set_device (CUBLAS_WORKSPACE_CONFIG=:4096:8)"
    assert set(FLAGS_SET) <= set(fake.log[:init])
    assert fake.log[init + 1] == "cuda.set_device(1)"


@pytest.mark.parametrize(
    ("fake", "reason"),
    [
        (FakeTorch(cuda_build=None), "is a CPU-only build (torch.version.cuda is None)"),
        (FakeTorch(available=False), "finds no usable CUDA device (torch.cuda.is_available() is False)"),
    ],
    ids=["cpu-build", "no-device"],
)
def test_gpu_start_without_cuda_stops_with_a_usage_error_and_changes_nothing(fake: FakeTorch, reason: str) -> None:
    env: dict[str, str] = {}
    with pytest.raises(pytest.UsageError) as info:
        gpu.prepare_gpu(fake, worker_index=0, environ=env)
    message = str(info.value)
    assert "--genguard-gpu needs a usable CUDA device" in message
    assert reason in message
    assert (
        'python -c "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.is_available())"' in message
    )
    assert "nvidia-smi" in message
    assert env == {}
    assert not any("=" in line for line in fake.log)  # no flag was touched
    assert not fake.initialized


def test_the_header_shows_device_versions_flags_and_the_worker_mapping() -> None:
    env: dict[str, str] = {}
    setup = gpu.prepare_gpu(FakeTorch(devices=2, environ=env), worker_index=0, environ=env)
    lines = gpu.format_header(setup, xdist=True)
    assert (
        lines[0] == "genguard: device cuda:0 (NVIDIA H200, sm90, 132 SMs), torch 2.13.0+cu126, CUDA 12.6, cuDNN 90100"
    )
    assert lines[1] == (
        "genguard: deterministic mode: use_deterministic_algorithms=True, CUBLAS_WORKSPACE_CONFIG=:4096:8 (set by "
        "genguard), cudnn.deterministic=True, cudnn.benchmark=False, TF32 matmul=False cudnn=False"
    )
    assert "environment class cuda12.6-sm90-<dtype>" in lines[2]
    assert lines[3] == "genguard: xdist workers use cuda:(worker index mod 2)"


def test_the_header_warns_when_cuda_was_initialised_first() -> None:
    env: dict[str, str] = {}
    fake = FakeTorch(environ=env)
    fake.cuda.set_device(0)
    lines = gpu.format_header(gpu.prepare_gpu(fake, worker_index=0, environ=env), xdist=False)
    assert any("warning: CUDA was initialised before" in line for line in lines)
    assert not any("xdist workers" in line for line in lines)


def test_configure_gpu_maps_an_xdist_worker_to_its_device(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # restored afterwards (setup writes os.environ)
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")
    config = pytester.parseconfig("--genguard-gpu")
    config.stash[SETTINGS_KEY] = settings_from_config(config)
    fake = FakeTorch(devices=2)
    gpu.configure_gpu(config, torch_mod=fake)
    assert gpu.device_for(config) == torch.device("cuda", 1)
    assert gpu.header_lines(config)[0].startswith("genguard: device cuda:1 (NVIDIA H200")


def test_genguard_device_is_the_cpu_without_the_flag(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_device(genguard_device):
            assert str(genguard_device) == "cpu"
        """
    )
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_genguard_gpu_without_cuda_exits_at_once_with_a_usage_error(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no usable CUDA device, on any machine
    pytester.makepyfile("def test_never_runs(): raise AssertionError('the run must stop before tests')")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--genguard-gpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "--genguard-gpu needs a usable CUDA device" in err
    assert "torch.cuda.is_available()" in err
    assert "nvidia-smi" in err
    assert "the run must stop" not in result.stdout.str()
