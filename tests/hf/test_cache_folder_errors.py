"""A cache folder genguard cannot write fails with a message naming the folder and the settings that move it, not
with a raw ``OSError ... .lock``; errors of the build itself are not disguised as folder errors.

A read-only folder is made read-only for real (tests/support/readonly_support.py: as root, the check runs without the
capabilities that bypass permission bits); a path under a regular file fails for any user; and the lock's creation
failing with a PermissionError is also checked in process (filelock's acquire patched at that boundary)."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path
from typing import Any

import filelock
import pytest
from readonly_support import unprivileged_python

from pytest_genguard import CacheFolderError
from pytest_genguard.hf.cache import ENV_VAR, cache_key, fetch

KEY = cache_key({"arch": "toy"})


def _build(tmp: Path) -> tuple[str, dict[str, Any]]:
    (tmp / "model.bin").write_text("weights")
    return "weights", {}


def _load(entry: Path, manifest: dict[str, Any]) -> str:
    return (entry / "model.bin").read_text()


def _check(message: str, root: Path) -> None:
    first = message.splitlines()[0]
    assert first.startswith(f"genguard cache folder {root} cannot be written (")
    assert "ini option genguard_cache_dir" in first and f"environment variable {ENV_VAR}" in first


def test_a_cache_folder_under_a_regular_file_names_the_folder_and_the_fix(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder")
    root = tmp_path / "file" / "cache"
    with pytest.raises(CacheFolderError) as info:
        fetch(root, KEY, build=_build, load=_load)
    _check(str(info.value), root)
    assert isinstance(info.value, OSError)  # callers catching OSError still do


def test_a_lock_file_that_cannot_be_created_names_the_folder_and_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def read_only(self: filelock.BaseFileLock, *args: Any, **kwargs: Any) -> Any:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), self.lock_file)

    monkeypatch.setattr(filelock.FileLock, "acquire", read_only)
    with pytest.raises(CacheFolderError) as info:
        fetch(tmp_path, KEY, build=_build, load=_load)
    _check(str(info.value), tmp_path)
    assert f"PermissionError: [Errno 13] Permission denied: '{tmp_path / KEY}.lock'" in str(info.value)


SCRIPT = """
import sys
from pathlib import Path
from pytest_genguard.hf.cache import fetch, cache_key

def build(tmp):
    (tmp / "model.bin").write_text("weights")
    return "weights", {}

try:
    fetch(Path(sys.argv[1]), cache_key({"arch": "toy"}), build=build, load=lambda entry, manifest: "weights")
except Exception as exc:
    print(type(exc).__name__)
    print(exc)
"""


def test_a_read_only_cache_folder_names_the_folder_and_the_fix(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    root.mkdir()
    root.chmod(0o555)
    try:
        done = subprocess.run(
            [*unprivileged_python(), "-c", SCRIPT, str(root)], capture_output=True, text=True, check=True, timeout=60
        )
    finally:
        root.chmod(0o755)
    kind, message = done.stdout.splitlines()[:2]
    assert kind == "CacheFolderError"
    _check(message, root)
    assert "PermissionError: [Errno 13] Permission denied" in message


def test_an_os_error_of_the_build_itself_is_not_called_a_folder_error(tmp_path: Path) -> None:
    def build(tmp: Path) -> tuple[str, dict[str, Any]]:
        raise FileNotFoundError(errno.ENOENT, "no such corpus", "corpus.txt")

    with pytest.raises(FileNotFoundError) as info:
        fetch(tmp_path, KEY, build=build, load=_load)
    assert not isinstance(info.value, CacheFolderError)
