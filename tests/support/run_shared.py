"""What a session fixture makes once per run and shares with the other pytest-xdist worker (pytest-xdist's own recipe:
a file in the workers' common temporary folder, written under a lock), so two workers do not both spend a minute on
the same reference or write the same 540 MB edited copy of a GGUF. Each result is written to a temporary name and
renamed into place: a worker killed mid-write leaves nothing the other would read."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from filelock import FileLock

__all__ = ["made_once", "made_once_in", "once_per_run", "run_folder"]


def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This run's folder shared by its workers: the workers' common parent under xdist (``pytest-N``), else the
    run's own base folder (its parent, ``pytest-of-<user>``, holds every run's folders: nothing is shared there)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def once_per_run(tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[], str]) -> str:
    """`make()`'s text, made by the first worker that asks and read back by every worker (the maker too, so every
    worker holds the same text)."""
    shared = run_folder(tmp_path_factory) / name
    with FileLock(f"{shared}.lock"):
        if not shared.is_file():
            partial = shared.with_name(f".{name}.{os.getpid()}.partial")
            partial.write_text(make(), encoding="utf-8")
            partial.replace(shared)
        return shared.read_text(encoding="utf-8")


def made_once(tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], Path]) -> Path:
    """The file `make(folder)` writes into an empty folder and returns, made once per run in a folder `name` of its
    own (a file name the caller chose is kept). Shared: no caller may change it."""
    return made_once_in(run_folder(tmp_path_factory), name, make)


def made_once_in(root: Path, name: str, make: Callable[[Path], Path]) -> Path:
    """`made_once` in a folder `root` that may outlive the run (a cache: `name` must then say everything the file
    depends on)."""
    folder = root / name
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{folder}.lock"):
        if not folder.is_dir():
            partial = folder.with_name(f".{name}.{os.getpid()}.partial")
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir(parents=True)
            made = make(partial)
            if made.parent != partial:
                raise ValueError(f"made_once({name!r}): {made} is not in the folder it was given ({partial})")
            partial.replace(folder)
        (made,) = folder.iterdir()
        return made
