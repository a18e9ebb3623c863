"""A GGUF's metadata is parsed once per state of the file (`engines.gguf_metadata`: gguf-py's reader parses the whole
vocabulary, seconds a read), and read again when the file changes: an edit in place keeps its size and inode, so its
times must tell, and a file written in the last moments is not kept at all (its clock's tick could hide a second
write)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

gguf = pytest.importorskip("gguf")
numpy = pytest.importorskip("numpy")

from pytest_genguard.engines import gguf_metadata  # noqa: E402  (gguf first: it imports gguf)

EPS = "llama.attention.layer_norm_rms_epsilon"


def write(path: Path, eps: float) -> Path:
    writer = gguf.GGUFWriter(str(path), arch="llama")
    writer.add_file_type(0)
    writer.add_float32(EPS, eps)
    writer.add_token_list(["a", "b", "c"])  # an array: left out of the fields
    writer.add_tensor("rope_freqs.weight", numpy.array([1.0, 2.0, 4.0], dtype=numpy.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def edit_in_place(path: Path, eps: float) -> None:
    """As gguf-py's gguf_set_metadata edits a value: through the reader's writable memory map."""
    reader = gguf.GGUFReader(str(path), "r+")
    field = reader.get_field(EPS)
    field.parts[field.data[0]][0] = eps
    reader.data.flush()
    del reader


def test_a_file_is_parsed_once_per_state_and_an_edit_in_place_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path / "model.gguf", 1e-5)
    monkeypatch.setattr(gguf_metadata, "RACY_NS", 0)  # this file is new: keep it at once
    first = gguf_metadata.read_metadata(path)
    assert (
        first.fields[EPS] == pytest.approx(1e-5)
        and first.file_type == 0
        and "tokenizer.ggml.tokens" not in first.fields
    )
    assert first.rope_freqs == (1.0, 2.0, 4.0)
    assert gguf_metadata.read_metadata(path) is first  # kept: not parsed again
    size, inode = path.stat().st_size, path.stat().st_ino
    time.sleep(0.05)  # past the file system clock's tick
    edit_in_place(path, 1e-4)
    assert (path.stat().st_size, path.stat().st_ino) == (size, inode)  # only its times say it changed
    assert gguf_metadata.read_metadata(path).fields[EPS] == pytest.approx(1e-4)


def test_a_file_written_just_now_is_not_kept(tmp_path: Path) -> None:
    path = write(tmp_path / "model.gguf", 1e-5)
    first = gguf_metadata.read_metadata(path)
    assert gguf_metadata.read_metadata(path) is not first  # parsed again: it may still be written within its tick
    edit_in_place(path, 1e-4)  # at once, perhaps within the same tick: seen all the same
    assert gguf_metadata.read_metadata(path).fields[EPS] == pytest.approx(1e-4)
