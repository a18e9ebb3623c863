"""The genguard fixtures. Each imports its module only when a test asks for it: the torch side, and syrupy for the
snapshot, stay out of the plugin's import (pytest imports the plugin in every project where it is installed)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    import torch
    from syrupy.assertion import SnapshotAssertion
    from transformers import PreTrainedTokenizerFast

    from pytest_genguard.engines import Engine
    from pytest_genguard.plugin.finetune_fixture import FinetuneFactory


@pytest.fixture(scope="session")
def genguard_device(pytestconfig: pytest.Config) -> torch.device:
    """The device genguard runs on: `cuda:(worker index mod device count)` with --genguard-gpu, else cpu."""
    from pytest_genguard.plugin.gpu import device_for

    return device_for(pytestconfig)


@pytest.fixture(scope="session")
def genguard_devices(pytestconfig: pytest.Config) -> list[torch.device]:
    """The devices to dispatch a model over (``device_map``, ``max_memory``): this worker's GPUs with --genguard-gpu
    (its `genguard_device` first, no GPU shared with another worker while there are enough), else ``[cpu]``."""
    from pytest_genguard.plugin.gpu import devices_for

    return devices_for(pytestconfig)


@pytest.fixture(scope="session")
def genguard_tokenizer() -> PreTrainedTokenizerFast:
    """The shipped tiny byte-level BPE tokenizer (offline)."""
    from pytest_genguard.hf.tiny import tiny_tokenizer

    return tiny_tokenizer()


@pytest.fixture(scope="session")
def genguard_finetune(pytestconfig: pytest.Config, genguard_device: torch.device) -> FinetuneFactory:
    """Factory: `genguard_finetune("gpt2", steps=..., seed=...)` returns a fine-tuned tiny model, cached."""
    from pytest_genguard.plugin.finetune_fixture import finetune_factory

    return finetune_factory(pytestconfig, genguard_device)


@pytest.fixture
def genguard_snapshot(snapshot: SnapshotAssertion, request: pytest.FixtureRequest) -> Any:
    """syrupy's `snapshot` with the genguard extension: tolerant, near-tie aware, stale-aware JSON snapshots."""
    from pytest_genguard.plugin.snapshot_fixture import genguard_snapshot_for

    return genguard_snapshot_for(snapshot, request)


@pytest.fixture(scope="session")
def genguard_engine(pytestconfig: pytest.Config) -> Callable[..., Engine]:
    """Factory: `genguard_engine("ctranslate2")` is a serving engine (`pytest_genguard.engines`) converting into
    genguard's cache folder; a test whose engine is not installed is skipped with the command that installs it."""
    from pytest_genguard.engines import EngineUnavailable, engine
    from pytest_genguard.plugin.finetune_fixture import cache_dir_for

    def genguard_engine(name: str, **options: str) -> Engine:
        try:
            return engine(name, cache_dir=cache_dir_for(pytestconfig), **options)
        except EngineUnavailable as exc:
            pytest.skip(str(exc))

    return genguard_engine


__all__ = [
    "genguard_device",
    "genguard_devices",
    "genguard_engine",
    "genguard_finetune",
    "genguard_snapshot",
    "genguard_tokenizer",
]
