"""`--genguard-gpu` with a model dispatched over several GPUs (`genguard_devices`): which GPUs an xdist worker may put
a ``device_map`` on, its `genguard_device` first, none shared with another worker while there are enough. The CUDA
side is a fake at the boundary (no GPU here): which GPU each worker gets, not what the GPUs compute."""

from __future__ import annotations

import itertools

import pytest
import torch
from fake_torch import FakeTorch

from pytest_genguard.plugin import gpu
from pytest_genguard.plugin.settings import SETTINGS_KEY, settings_from_config


@pytest.mark.parametrize(
    ("worker", "devices", "workers", "expected"),
    [
        (0, 1, 1, (0,)),
        (0, 4, 1, (0, 1, 2, 3)),  # one worker: every GPU, its genguard_device first
        (0, 4, 2, (0, 2)),
        (1, 4, 2, (1, 3)),
        (2, 8, 3, (2, 5)),
        (1, 2, 2, (1,)),
        (3, 2, 4, (1,)),  # more workers than GPUs: its own one, shared as its genguard_device is
    ],
)
def test_a_worker_dispatches_over_its_own_gpus(
    worker: int, devices: int, workers: int, expected: tuple[int, ...]
) -> None:
    assert gpu.gpus_for_worker(worker, devices, workers) == expected
    assert expected[0] == gpu.gpu_for_worker(worker, devices)


@pytest.mark.parametrize(("devices", "workers"), [(4, 2), (8, 3), (6, 6), (5, 1)])
def test_workers_share_no_gpu_and_leave_none_unused_when_there_are_enough(devices: int, workers: int) -> None:
    shares = [set(gpu.gpus_for_worker(w, devices, workers)) for w in range(workers)]
    assert all(not a & b for a, b in itertools.combinations(shares, 2))
    assert set().union(*shares) == set(range(devices))


def test_the_worker_mapping_refuses_no_workers() -> None:
    with pytest.raises(ValueError, match="workers must be >= 1"):
        gpu.gpus_for_worker(0, 2, 0)


def test_genguard_devices_are_this_workers_gpus_in_gpu_mode(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # restored afterwards (setup writes os.environ)
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    config = pytester.parseconfig("--genguard-gpu")
    config.stash[SETTINGS_KEY] = settings_from_config(config)
    gpu.configure_gpu(config, torch_mod=FakeTorch(devices=4))
    assert gpu.device_for(config) == torch.device("cuda", 1)
    assert gpu.devices_for(config) == [torch.device("cuda", 1), torch.device("cuda", 3)]


def test_genguard_devices_are_the_cpu_without_the_flag(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_devices(genguard_devices, genguard_device):
            assert [str(d) for d in genguard_devices] == ["cpu"] and genguard_devices[0] == genguard_device
        """
    )
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_under_torchrun_each_rank_takes_the_gpu_of_its_local_rank(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # transformers binds a tensor-parallel rank to cuda:LOCAL_RANK; genguard_device must name the same GPU
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    config = pytester.parseconfig("--genguard-gpu")
    config.stash[SETTINGS_KEY] = settings_from_config(config)
    gpu.configure_gpu(config, torch_mod=FakeTorch(devices=4))
    assert gpu.device_for(config) == torch.device("cuda", 1)
    assert gpu.devices_for(config) == [torch.device("cuda", 1), torch.device("cuda", 3)]
