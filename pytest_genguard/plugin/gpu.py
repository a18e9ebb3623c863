"""GPU mode (`--genguard-gpu`): CUDA checks, deterministic setup, the xdist worker (or torchrun rank) -> GPU mapping,
the header.

Decoding on CUDA is reproducible run to run only in deterministic mode, and only if that mode is set up before CUDA
initialises (cuBLAS reads `CUBLAS_WORKSPACE_CONFIG` when it creates its handles). So `configure_gpu()` runs in
`pytest_configure`, before any test or fixture touches CUDA: it checks that a CUDA device is usable (stopping the
run at once with a `pytest.UsageError` when none is), then sets the environment variable and the torch flags, and
only then selects this worker's device, which initialises CUDA.

Everything that touches torch goes through a `torch_mod` parameter, so the CUDA branches are unit-tested on CPU with a
fake module at the boundary; the worker -> GPU mapping is a pure function. `record()` has no default-device hook on
purpose: it runs where the model is, and GPU mode puts the genguard fixtures' models on `genguard_device`.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from pytest_genguard.core.environments import device_class
from pytest_genguard.hf.environment import cuda_unavailable_reason
from pytest_genguard.plugin import distributed
from pytest_genguard.plugin.settings import settings, worker_index

if TYPE_CHECKING:
    import torch

CUBLAS_ENV = "CUBLAS_WORKSPACE_CONFIG"
DEFAULT_CUBLAS_CONFIG = ":4096:8"
DETERMINISTIC_CUBLAS_CONFIGS = (":4096:8", ":16:8")
"""The values cuBLAS documents as deterministic (one buffer per stream); any other makes deterministic mode raise."""

HOW_TO_CHECK = (
    "check with:\n"
    '  python -c "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.is_available())"\n'
    "  nvidia-smi\n"
    "torch.version.cuda None means a CPU-only build of torch: install a CUDA build "
    "(https://pytorch.org/get-started/locally/); check CUDA_VISIBLE_DEVICES too. Or run without --genguard-gpu."
)

SETUP_KEY = pytest.StashKey["GpuSetup"]()


@dataclass(frozen=True)
class Determinism:
    """The deterministic-mode flags as they are after `setup_determinism()` (read back, not assumed)."""

    cublas_workspace_config: str
    cublas_config_set_by_genguard: bool
    deterministic_algorithms: bool
    cudnn_deterministic: bool
    cudnn_benchmark: bool
    tf32_matmul: bool
    tf32_cudnn: bool
    cuda_initialized_before: bool
    """CUDA was already initialised when genguard set up (something imported it earlier): the flags hold, but a
    cuBLAS handle created before may have missed the workspace setting."""

    def describe(self) -> str:
        cfg = self.cublas_workspace_config + (" (set by genguard)" if self.cublas_config_set_by_genguard else "")
        return (
            f"use_deterministic_algorithms={self.deterministic_algorithms}, {CUBLAS_ENV}={cfg}, "
            f"cudnn.deterministic={self.cudnn_deterministic}, cudnn.benchmark={self.cudnn_benchmark}, "
            f"TF32 matmul={self.tf32_matmul} cudnn={self.tf32_cudnn}"
        )


@dataclass(frozen=True)
class GpuSetup:
    """What GPU mode set up in this process: the device this worker uses, what it is, and the determinism flags."""

    index: int
    device_count: int
    worker: int
    name: str
    capability: str
    sm_count: int
    torch_version: str
    cuda_version: str | None
    cudnn_version: int | None
    determinism: Determinism

    @property
    def device(self) -> str:
        return f"cuda:{self.index}"

    @property
    def environment_class_prefix(self) -> str:
        """The environment class of this run's traces without its dtype (`core.environments.device_class`)."""
        return device_class({"device_type": "cuda", "gpu_capability": self.capability, "cuda": self.cuda_version})


def setup_determinism(torch_mod: Any, environ: MutableMapping[str, str] | None = None) -> Determinism:
    """Put torch in deterministic mode: `CUBLAS_WORKSPACE_CONFIG` first (when absent), then the torch flags.

    An existing non-deterministic workspace setting is a usage error rather than silently replaced: the user set it.
    """
    env = os.environ if environ is None else environ
    initialized_before = bool(torch_mod.cuda.is_initialized())
    existing = env.get(CUBLAS_ENV)
    if existing is None or existing == "":
        env[CUBLAS_ENV] = DEFAULT_CUBLAS_CONFIG
    elif existing not in DETERMINISTIC_CUBLAS_CONFIGS:
        raise pytest.UsageError(
            f"--genguard-gpu: {CUBLAS_ENV}={existing!r} is not deterministic; deterministic cuBLAS needs "
            f"{' or '.join(DETERMINISTIC_CUBLAS_CONFIGS)}. Unset it (genguard sets {DEFAULT_CUBLAS_CONFIG}) or set "
            f"{CUBLAS_ENV}={DEFAULT_CUBLAS_CONFIG}."
        )
    torch_mod.use_deterministic_algorithms(True)
    torch_mod.backends.cudnn.deterministic = True
    torch_mod.backends.cudnn.benchmark = False
    torch_mod.backends.cuda.matmul.allow_tf32 = False
    torch_mod.backends.cudnn.allow_tf32 = False
    return Determinism(
        cublas_workspace_config=env[CUBLAS_ENV],
        cublas_config_set_by_genguard=not existing,
        deterministic_algorithms=bool(torch_mod.are_deterministic_algorithms_enabled()),
        cudnn_deterministic=bool(torch_mod.backends.cudnn.deterministic),
        cudnn_benchmark=bool(torch_mod.backends.cudnn.benchmark),
        tf32_matmul=bool(torch_mod.backends.cuda.matmul.allow_tf32),
        tf32_cudnn=bool(torch_mod.backends.cudnn.allow_tf32),
        cuda_initialized_before=initialized_before,
    )


def gpu_for_worker(worker_index: int, device_count: int) -> int:
    """The GPU index an xdist worker uses: workers take the GPUs round-robin (gw0 -> 0, gw1 -> 1, ..., wrapping)."""
    if device_count < 1:
        raise ValueError(f"gpu_for_worker: device_count must be >= 1, got {device_count}")
    if worker_index < 0:
        raise ValueError(f"gpu_for_worker: worker_index must be >= 0, got {worker_index}")
    return worker_index % device_count


def gpus_for_worker(worker_index: int, device_count: int, workers: int) -> tuple[int, ...]:
    """The GPUs an xdist worker may dispatch a model over (`device_map`, `max_memory`): its own (`gpu_for_worker`)
    first, then every other GPU whose index is the worker's modulo the number of workers (gw1 of 2 workers on 4 GPUs:
    1 and 3), so no two workers share one; with more workers than GPUs, its own one alone (shared, as its
    `genguard_device` is)."""
    own = gpu_for_worker(worker_index, device_count)
    if workers < 1:
        raise ValueError(f"gpus_for_worker: workers must be >= 1, got {workers}")
    if workers > device_count:
        return (own,)
    return (own, *(g for g in range(device_count) if g % workers == worker_index % workers and g != own))


def prepare_gpu(torch_mod: Any, worker_index: int, environ: MutableMapping[str, str] | None = None) -> GpuSetup:
    """The whole of GPU mode's start: the CUDA check, deterministic setup, then this worker's device.

    The check only queries (`is_available`, `device_count` do not initialise torch's CUDA state), so nothing is
    changed when it fails; deterministic setup comes before `set_device`, the first call that initialises CUDA.
    """
    reason = cuda_unavailable_reason(torch_mod)
    if reason is not None:
        raise pytest.UsageError(f"--genguard-gpu needs a usable CUDA device, but {reason}.\n{HOW_TO_CHECK}")
    determinism = setup_determinism(torch_mod, environ)
    count = int(torch_mod.cuda.device_count())
    index = gpu_for_worker(worker_index, count)
    torch_mod.cuda.set_device(index)
    props = torch_mod.cuda.get_device_properties(index)
    major, minor = torch_mod.cuda.get_device_capability(index)
    cudnn_ok = torch_mod.backends.cudnn.is_available()
    return GpuSetup(
        index=index,
        device_count=count,
        worker=worker_index,
        name=str(props.name),
        capability=f"{major}.{minor}",
        sm_count=int(props.multi_processor_count),
        torch_version=str(torch_mod.__version__),
        cuda_version=str(torch_mod.version.cuda),
        cudnn_version=int(torch_mod.backends.cudnn.version()) if cudnn_ok else None,
        determinism=determinism,
    )


def configure_gpu(config: pytest.Config, torch_mod: Any = None) -> GpuSetup:
    """`pytest_configure` for --genguard-gpu: set up and stash this process's `GpuSetup` (UsageError without CUDA)."""
    if torch_mod is None:
        import torch as torch_mod
    setup = prepare_gpu(torch_mod, placement(config)[0])
    config.stash[SETUP_KEY] = setup
    return setup


def placement(config: pytest.Config) -> tuple[int, int]:
    """(this process's index, how many share the GPUs): torchrun's local rank and ranks on the machine, else the xdist
    worker's index and the workers (torchrun's ranks each take their own GPU, as transformers binds them)."""
    ranks = distributed.local_rank()
    return ranks if ranks is not None else (worker_index(config), worker_count(config))


def format_header(setup: GpuSetup, xdist: bool) -> list[str]:
    """The report header lines for GPU mode: device, versions, determinism flags (and the worker mapping)."""
    lines = [
        f"genguard: device {setup.device} ({setup.name}, sm{setup.capability.replace('.', '')}, "
        f"{setup.sm_count} SMs), torch {setup.torch_version}, CUDA {setup.cuda_version}, "
        f"cuDNN {setup.cudnn_version}",
        f"genguard: deterministic mode: {setup.determinism.describe()}",
        f"genguard: environment class {setup.environment_class_prefix}-<dtype> "
        "(bitwise checks within one environment, the tolerant rule across environments)",
    ]
    if xdist or setup.device_count > 1:
        lines.append(f"genguard: xdist workers use cuda:(worker index mod {setup.device_count})")
    if setup.determinism.cuda_initialized_before:
        lines.append(
            "genguard: warning: CUDA was initialised before genguard's deterministic setup (a plugin or conftest "
            f"imported it); set {CUBLAS_ENV}={DEFAULT_CUBLAS_CONFIG} in the environment to be sure"
        )
    return lines


def header_lines(config: pytest.Config) -> list[str]:
    setup = config.stash.get(SETUP_KEY, None)
    if setup is None:
        setup = configure_gpu(config)
    xdist = bool(getattr(config.option, "numprocesses", None))
    return format_header(setup, xdist)


def worker_count(config: pytest.Config) -> int:
    """How many xdist workers the run has (1 without xdist)."""
    workerinput = getattr(config, "workerinput", None)
    count = workerinput.get("workercount") if isinstance(workerinput, dict) else None
    try:
        return max(1, int(count if count is not None else os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    except ValueError:
        return 1


def devices_for(config: pytest.Config) -> list[torch.device]:
    """The devices genguard fixtures give a model dispatched over several (`genguard_devices`): this worker's GPUs in
    GPU mode (`gpus_for_worker`, its `genguard_device` first), else the CPU."""
    import torch

    first = device_for(config)
    setup = config.stash.get(SETUP_KEY, None)
    if setup is None:
        return [first]
    index, sharing = placement(config)
    return [torch.device(f"cuda:{i}") for i in gpus_for_worker(index, setup.device_count, sharing)]


def device_for(config: pytest.Config) -> torch.device:
    """The device genguard fixtures use: this worker's CUDA device in GPU mode, else the CPU."""
    import torch

    if not settings(config).gpu:
        return torch.device("cpu")
    setup = config.stash.get(SETUP_KEY, None)
    if setup is None:
        setup = configure_gpu(config)
    return torch.device(setup.device)
