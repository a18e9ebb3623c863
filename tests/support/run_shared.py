"""A session fixture's result made once per run and shared by the pytest-xdist workers (pytest-xdist's own recipe:
a file in the workers' common temporary folder, written under a lock), so two workers do not both spend a minute on
the same reference. Text in, text out: the caller serializes (a trace's JSON form round-trips it bit for bit)."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
from filelock import FileLock

__all__ = ["once_per_run"]


def once_per_run(tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[], str]) -> str:
    """`make()`'s text, made by the first worker that asks and read back by the others (and by itself, so every
    worker holds the same text). Without xdist it is simply made: the common folder of one run's workers is the
    run's own (``pytest-N``), but a run without workers has none (its parent holds every run's folders)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return make()
    shared = tmp_path_factory.getbasetemp().parent / name
    with FileLock(f"{shared}.lock"):
        if not shared.is_file():
            partial = shared.with_name(f".{name}.{os.getpid()}.partial")
            partial.write_text(make(), encoding="utf-8")
            partial.replace(shared)  # a worker killed mid-write leaves no file the others would read
        return shared.read_text(encoding="utf-8")
