"""A GGUF's metadata is parsed once per state of the file (`engines.gguf_metadata`: gguf-py's reader parses the whole
vocabulary, seconds a read), and read again when the file changes: an edit in place keeps its size and inode, so its
times must tell, and a file written in the last moments is not kept at all (its clock's tick could hide a second
write)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

gguf = pytest.importorskip("gguf")
numpy = pytest.importorskip("numpy")

from pytest_genguard.core import file_states  # noqa: E402
from pytest_genguard.engines import gguf_metadata  # noqa: E402  (gguf first: gguf_metadata imports it)

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
    monkeypatch.setattr(file_states, "RACY_NS", 0)  # this file is new: keep it at once
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


def every_kind(path: Path, endianess: Any = None) -> Path:
    """A file with a field of every GGUF value type, arrays of numbers, strings and arrays, and rope factors."""
    writer = gguf.GGUFWriter(str(path), arch="llama", **({} if endianess is None else {"endianess": endianess}))
    writer.add_file_type(7)
    values = {"uint8": 200, "int8": -100, "uint16": 60000, "int16": -30000, "uint32": 4_000_000_000}
    values |= {"int32": -2_000_000_000, "float32": 1e-5, "uint64": 2**63 + 5, "int64": -(2**62), "float64": 1e-300}
    values |= {"bool": True, "string": "Café 🌊\n{% if x %}"}
    for i, (kind, value) in enumerate(values.items()):
        getattr(writer, f"add_{kind}")(f"test.{i}.{kind}", value)
    writer.add_token_list(["a", "é", "🌊" * 40])
    writer.add_token_scores([0.5, -1.0, 2.0])
    writer.add_array("test.nested", [[1, 2], [3]])
    writer.add_array("test.empty", [])
    writer.add_string("test.after_arrays", "still read")
    writer.add_tensor("blk.0.attn_norm.weight", numpy.ones(7, dtype=numpy.float32))
    writer.add_tensor(gguf_metadata.ROPE_FREQS, numpy.array([1.0, 0.25, 8.0], dtype=numpy.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def readers_fields(path: Path) -> tuple[dict[str, Any], tuple[float, ...] | None]:
    """What gguf-py's own reader gives for the same: its scalar and string fields, the rope factors."""
    reader = gguf.GGUFReader(str(path))
    fields = {
        key: field.contents()
        for key, field in reader.fields.items()
        if not (field.types and field.types[0] == gguf.GGUFValueType.ARRAY)
    }
    rope = [t for t in reader.tensors if t.name == gguf_metadata.ROPE_FREQS]
    return fields, (tuple(float(x) for x in rope[0].data.reshape(-1)) if rope else None)


@pytest.mark.parametrize("order", ["little", "big"])
def test_the_header_reads_as_gguf_pys_reader_reads_it(tmp_path: Path, order: str) -> None:
    endianess = None if order == "little" else gguf.GGUFEndian.BIG
    path = every_kind(tmp_path / "model.gguf", endianess)
    read = gguf_metadata.read_metadata(path)
    fields, rope = readers_fields(path)
    assert dict(read.fields) == fields and read.rope_freqs == rope == (1.0, 0.25, 8.0)
    assert read.fields["test.11.string"] == "Café 🌊\n{% if x %}" and read.fields["test.after_arrays"] == "still read"
    assert read.file_type == 7 and "tokenizer.ggml.tokens" not in read.fields and "test.nested" not in read.fields


def test_a_truncated_or_foreign_header_is_named(tmp_path: Path) -> None:
    whole = every_kind(tmp_path / "model.gguf").read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(whole[:200])  # inside the fields
    with pytest.raises(ValueError, match=r"cut.gguf: the GGUF header is truncated or corrupt .*write the file again"):
        gguf_metadata.read_metadata(cut)
    foreign = tmp_path / "v1.gguf"
    foreign.write_bytes(whole[:4] + (1).to_bytes(4, "little") + whole[8:])
    with pytest.raises(ValueError, match=r"v1.gguf: GGUF version 1; genguard reads versions 2 and 3"):
        gguf_metadata.read_metadata(foreign)
    other = tmp_path / "other.bin"
    other.write_bytes(b"GGML" + whole[4:])
    with pytest.raises(ValueError, match=r"other.bin: not a GGUF file"):
        gguf_metadata.read_metadata(other)


def test_llama_cpps_own_files_read_as_gguf_pys_reader_reads_them(f32_gguf: Path, gguf_of: Any) -> None:
    # The converter's F32 and Q8_0 of the real chat model, and the shipped Q4_1: a real vocabulary (49,152 tokens
    # and 48,900 merges stepped over), a chat template, llama.cpp's own keys.
    from pytest_genguard.hf.smollm2 import gguf_path

    for path in (f32_gguf, gguf_of("q8_0"), gguf_path()):
        read = gguf_metadata.read_metadata(path)
        assert (dict(read.fields), read.rope_freqs) == readers_fields(path), path
        assert "tokenizer.chat_template" in read.fields and read.fields["general.architecture"] == "llama"
