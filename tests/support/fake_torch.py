"""A fake `torch` module for the CUDA branches of GPU mode and the environment, so they are tested on CPU.

It models only what genguard reads and sets: CUDA availability and devices, the determinism flags, versions. Every
call and flag write is appended to `log`, and CUDA counts as initialised from the first call that initialises it
in real torch (`set_device`, `get_device_properties`, `current_device`), so tests can check what happened before.
"""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any


class _Flags:
    """An attribute bag that logs every write (`cudnn.deterministic = True` -> "cudnn.deterministic=True")."""

    def __init__(self, owner: FakeTorch, prefix: str, **values: Any) -> None:
        object.__setattr__(self, "_owner", owner)
        object.__setattr__(self, "_prefix", prefix)
        for key, value in values.items():
            object.__setattr__(self, key, value)

    def __setattr__(self, name: str, value: Any) -> None:
        owner: FakeTorch = object.__getattribute__(self, "_owner")
        owner.log.append(f"{object.__getattribute__(self, '_prefix')}.{name}={value}")
        if owner.frozen_flags:  # a torch whose flags do not take (to prove values are read back, not assumed)
            return
        object.__setattr__(self, name, value)


class FakeTorch:
    """`torch` as GPU mode sees it: `FakeTorch(cuda_build="12.6", devices=2)`, or a CPU build (`cuda_build=None`)."""

    def __init__(
        self,
        *,
        cuda_build: str | None = "12.6",
        devices: int = 1,
        available: bool = True,
        name: str = "NVIDIA H200",
        capability: tuple[int, int] = (9, 0),
        sm_count: int = 132,
        cudnn_version: int = 90100,
        frozen_flags: bool = False,
        environ: dict[str, str] | None = None,
    ) -> None:
        self.log: list[str] = []
        self.environ: Any = os.environ if environ is None else environ
        self.frozen_flags = frozen_flags
        self.initialized = False
        self.deterministic = False
        self.current = 0
        self.__version__ = "2.13.0+cu126" if cuda_build else "2.13.0+cpu"
        self.version = SimpleNamespace(cuda=cuda_build)
        self._devices = devices if cuda_build else 0
        self._available = available and bool(cuda_build) and devices > 0
        self._props = SimpleNamespace(name=name, multi_processor_count=sm_count)
        self._capability = capability
        self.cuda = SimpleNamespace(
            is_available=self._is_available,
            device_count=self._device_count,
            is_initialized=lambda: self.initialized,
            set_device=self._set_device,
            current_device=self._current_device,
            get_device_properties=self._get_device_properties,
            get_device_capability=self._get_device_capability,
        )
        self.backends = SimpleNamespace(
            cudnn=_Flags(
                self,
                "cudnn",
                deterministic=False,
                benchmark=True,
                allow_tf32=True,
                version=lambda: cudnn_version,
                is_available=lambda: True,
            ),
            cuda=SimpleNamespace(matmul=_Flags(self, "matmul", allow_tf32=True)),
            cpu=SimpleNamespace(get_cpu_capability=lambda: "AVX2"),
        )

    # ------------------------------------------------------------------ torch.*
    def use_deterministic_algorithms(self, mode: bool) -> None:
        self.log.append(f"use_deterministic_algorithms={mode}")
        if not self.frozen_flags:
            self.deterministic = mode

    def are_deterministic_algorithms_enabled(self) -> bool:
        return self.deterministic

    def get_num_threads(self) -> int:
        return 4

    # ------------------------------------------------------------------ torch.cuda.*
    def _init(self, call: str) -> None:
        if not self.initialized:
            cublas = self.environ.get("CUBLAS_WORKSPACE_CONFIG")
            self.log.append(f"cuda initialised by {call} (CUBLAS_WORKSPACE_CONFIG={cublas})")
        self.initialized = True

    def _is_available(self) -> bool:
        self.log.append("cuda.is_available")
        return self._available

    def _device_count(self) -> int:
        self.log.append("cuda.device_count")
        return self._devices

    def _set_device(self, index: int) -> None:
        self._init("set_device")
        self.log.append(f"cuda.set_device({index})")
        self.current = index

    def _current_device(self) -> int:
        self._init("current_device")
        return self.current

    def _get_device_properties(self, index: int) -> Any:
        self._init("get_device_properties")
        self.log.append(f"cuda.get_device_properties({index})")
        return self._props

    def _get_device_capability(self, index: int) -> tuple[int, int]:
        self._init("get_device_capability")
        return self._capability
