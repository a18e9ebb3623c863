"""`kept_files.KeptPerState`: a value is read once per state of its files, read again after any edit, and never kept
from a file written just now (torch-free: the rule alone)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from pytest_genguard.core import file_states
from pytest_genguard.engines.kept_files import KeptPerState


class Reads:
    """A reader that counts its reads and returns the file's text."""

    def __init__(self, path: Path) -> None:
        self.path, self.count = path, 0

    def __call__(self) -> str:
        self.count += 1
        return self.path.read_text()


def aged(path: Path, text: str) -> Path:
    """`path` written, its modification time set back; its change time is now, so `RACY_NS` is set to 0 for it."""
    path.write_text(text)
    os.utime(path, ns=(time.time_ns() - 10**10,) * 2)
    return path


def test_read_once_per_state_and_again_after_an_edit_of_the_same_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(file_states, "RACY_NS", 0)
    path = aged(tmp_path / "a.gguf", "one")
    kept: KeptPerState[str] = KeptPerState(4)
    reads = Reads(path)
    assert kept.get(path, reads) == kept.get(path, reads) == "one"
    assert reads.count == 1
    time.sleep(0.01)  # past the file system clock's tick
    path.write_text("two")  # the same size and inode: only its times say it changed
    assert kept.get(path, reads) == "two" and reads.count == 2


def test_a_file_written_just_now_is_read_at_every_call(tmp_path: Path) -> None:
    path = tmp_path / "a.gguf"
    path.write_text("one")
    kept: KeptPerState[str] = KeptPerState(4)
    reads = Reads(path)
    kept.get(path, reads)
    kept.get(path, reads)
    assert reads.count == 2  # within RACY_NS of its write: a second write in the same tick would not show


def test_a_change_to_a_file_it_also_depends_on_is_read_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(file_states, "RACY_NS", 0)
    path = aged(tmp_path / "a.gguf", "one")
    beside = aged(tmp_path / "tokenizer_config.json", "{}")
    kept: KeptPerState[str] = KeptPerState(4)
    reads = Reads(path)
    kept.get(path, reads, also=(tmp_path, beside))
    kept.get(path, reads, also=(tmp_path, beside))
    assert reads.count == 1
    time.sleep(0.01)
    beside.write_text('{"x": 1}')
    kept.get(path, reads, also=(tmp_path, beside))
    assert reads.count == 2
    time.sleep(0.01)
    (tmp_path / "chat_template.jinja").write_text("")  # a new file in the folder: the folder's own times change
    kept.get(path, reads, also=(tmp_path, beside))
    assert reads.count == 3


def test_only_the_last_size_files_are_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(file_states, "RACY_NS", 0)
    paths = [aged(tmp_path / f"{i}.gguf", str(i)) for i in range(3)]
    kept: KeptPerState[str] = KeptPerState(2)
    reads = [Reads(p) for p in paths]
    for path, read in zip(paths, reads, strict=True):
        kept.get(path, read)
    kept.get(paths[2], reads[2])
    kept.get(paths[1], reads[1])
    kept.get(paths[0], reads[0])  # the first kept was dropped for the third
    assert [r.count for r in reads] == [2, 1, 1]
