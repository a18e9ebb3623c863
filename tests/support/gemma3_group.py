"""The xdist group of the tests that hold Gemma 3 270M in memory: its float32 model, the long probe's reference side
(2,048 positions x 262,144 logits: 2 GB) and llama.cpp contexts of its GGUF files. README's command
(``pytest -n 2 --dist loadgroup``) runs the group in one worker, and first: xdist starts the largest group first.

When a process has torn down the last test of the group it collected (the root conftest's
``pytest_runtest_teardown``), what the group kept is dropped (`release`) and the file named by
``$GENGUARD_CI_GEMMA3_DONE`` is touched: `.ci/run` starts its vLLM servers on it, which do not fit in memory beside
the group (a worker was killed for memory twice when they ran together)."""

from __future__ import annotations

import gc
import os
from collections.abc import Callable
from pathlib import Path

import pytest

GEMMA3 = "gemma3"
MARK = pytest.mark.xdist_group(GEMMA3)
DONE_ENV = "GENGUARD_CI_GEMMA3_DONE"

_RELEASES: list[Callable[[], None]] = []


def in_group(item: pytest.Item) -> bool:
    return any(GEMMA3 in mark.args or mark.kwargs.get("name") == GEMMA3 for mark in item.iter_markers("xdist_group"))


def on_release(drop: Callable[[], None]) -> None:
    """`drop` runs when the group is done in this process (a module's cache of Gemma's model lets go of it)."""
    _RELEASES.append(drop)


def release() -> None:
    """The group is done in this process: what it kept is dropped, and `.ci/run` told."""
    from pytest_genguard.hf.long_probe import forget

    while _RELEASES:
        _RELEASES.pop()()
    forget()  # the long probe's reference sides, kept while their model lives
    gc.collect()
    done = os.environ.get(DONE_ENV)
    if done:
        Path(done).touch()
