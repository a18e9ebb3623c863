"""The `genguard_finetune` fixture's factory: `pytest_genguard.hf.finetune` with the run's cache dir, pin dir,
device, ``--snapshot-update`` and ``--genguard-rebuild``, memoized per process by its arguments."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, Unpack

import pytest

from pytest_genguard.core.events import PinEvent, emit
from pytest_genguard.hf.cache import default_cache_dir
from pytest_genguard.hf.finetune import Build, FineTuned, Pinning, make
from pytest_genguard.hf.pins import PinMode
from pytest_genguard.hf.recipe import Recipe, RecipeArgs
from pytest_genguard.plugin.settings import settings

if TYPE_CHECKING:
    import torch

__all__ = ["FinetuneFactory", "cache_dir_for", "finetune_factory", "run_id_for"]


class FinetuneFactory(Protocol):
    """What `genguard_finetune` is: ``genguard_finetune("gpt2", steps=..., seed=..., pinned=True)``."""

    def __call__(self, arch: str | Recipe = "gpt2", *, pinned: bool = True, **recipe: Unpack[RecipeArgs]) -> FineTuned:
        """A fine-tuned tiny model. `pinned=True`: the pinned weights (the same on every machine: what decoding
        snapshots need); `pinned=False`: trained on this machine (what a test of training itself needs)."""


def cache_dir_for(config: pytest.Config) -> Path:
    """Inside pytest: ini `genguard_cache_dir`, else pytest's cache dir (`.pytest_cache/d/genguard`), else (with
    `-p no:cacheprovider`) the cache outside pytest."""
    configured = settings(config).cache_dir
    if configured is not None:
        return configured
    cache = getattr(config, "cache", None)
    if cache is not None:
        return Path(cache.mkdir("genguard"))
    return default_cache_dir()


def run_id_for(config: pytest.Config) -> str:
    """One id per test run, shared by the xdist workers of the run (so --genguard-rebuild retrains once)."""
    workerinput = getattr(config, "workerinput", None)
    if isinstance(workerinput, dict) and workerinput.get("testrunuid"):
        return str(workerinput["testrunuid"])
    return uuid.uuid4().hex


def finetune_factory(config: pytest.Config, device: torch.device) -> FinetuneFactory:
    """The `genguard_finetune` fixture's value for this run."""
    current = settings(config)
    root = cache_dir_for(config)
    rebuild = current.rebuild
    run_id = run_id_for(config)
    progress = config.getoption("capture", "fd") == "no" and sys.stderr.isatty()
    mode: PinMode = "refresh" if rebuild else "create" if current.snapshot_update else "use"
    pinning = Pinning(current.pin_dir, mode)
    memo: dict[tuple[Recipe, bool], FineTuned] = {}

    def force(manifest: dict[str, Any]) -> bool:
        return rebuild and manifest.get("run_id") != run_id

    build = Build(root, device, progress, force, run_id)

    def genguard_finetune(
        arch: str | Recipe = "gpt2", *, pinned: bool = True, **recipe: Unpack[RecipeArgs]
    ) -> FineTuned:
        """A fine-tuned tiny model. `pinned=True`: the pinned weights (the same on every machine: what decoding
        snapshots need); `pinned=False`: trained on this machine (what a test of training itself needs)."""
        __tracebackhide__ = True
        spec = Recipe.of(arch, **recipe)
        key = (spec, bool(pinned))
        if key not in memo:
            memo[key] = make(spec, build, pinning if pinned else None)
        elif memo[key].pin is not None:  # every test that uses a pin says so (unused pins are listed, see pin_usage)
            emit(PinEvent(str(memo[key].pin), "loaded"))
        return memo[key]

    return genguard_finetune
