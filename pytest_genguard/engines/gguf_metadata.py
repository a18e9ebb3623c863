"""A GGUF's metadata, read once per state of the file, from its header alone. gguf-py's ``GGUFReader`` parses every
field when it opens a file, each element of the vocabulary's arrays through its own numpy view (98,000 strings for
SmolLM2-135M: 2.4 s a read quiet, 5 to 14 s on a busy 2-core machine; llama.cpp's own pull request #13378 is open for
it), while genguard asks a file only for its scalars (its type for the judgement and each trace's environment, its
chat template and hyperparameters for the conformance checks) and one small tensor: 20 reads cost the llama.cpp
tests a fifth of their time. So the header is walked here, arrays stepped over by their lengths, with gguf-py's own
tables (magic, versions, value types, the default alignment); `tests/engines/test_gguf_metadata.py` holds what it
reads equal to ``GGUFReader``'s fields on files written by gguf-py's writer and by llama.cpp's tools. It is kept per
state of the file (`kept_files`) for the few files a process judges.
"""

from __future__ import annotations

import mmap
import struct
import sys
from array import array
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import gguf

from pytest_genguard.engines.kept_files import KeptPerState

__all__ = ["GGUFMetadata", "read_metadata"]

KEPT_FILES = 16
"""How many files' metadata a process keeps (a few hundred kilobytes each at most: no array is kept)."""
ROPE_FREQS = "rope_freqs.weight"
"""The one tensor the checks read (llama3's per-frequency rope factors)."""


@dataclass(frozen=True)
class GGUFMetadata:
    """A GGUF's scalar and string metadata by key (arrays such as the vocabulary left out), its file type's number,
    and its rope factors tensor (None: the file has none)."""

    fields: MappingProxyType[str, Any]
    rope_freqs: tuple[float, ...] | None

    @property
    def file_type(self) -> int | None:
        """``general.file_type`` (None: the key is missing)."""
        value = self.fields.get("general.file_type")
        return None if value is None else int(value)


_KEPT: KeptPerState[GGUFMetadata] = KeptPerState(KEPT_FILES)


def read_metadata(path: Path | str) -> GGUFMetadata:
    """`path`'s metadata, parsed once per state of the file (`kept_files`: another file under the name, or an edit,
    is read again; a file written while it was read, or just now, is not kept)."""
    resolved = Path(path).resolve()
    return _KEPT.get(resolved, lambda: _parse(resolved))


_SCALARS = {  # GGUFValueType -> struct format (sizes as the GGUF spec and gguf-py's reader give them)
    gguf.GGUFValueType.UINT8: "B",
    gguf.GGUFValueType.INT8: "b",
    gguf.GGUFValueType.UINT16: "H",
    gguf.GGUFValueType.INT16: "h",
    gguf.GGUFValueType.UINT32: "I",
    gguf.GGUFValueType.INT32: "i",
    gguf.GGUFValueType.FLOAT32: "f",
    gguf.GGUFValueType.BOOL: "?",
    gguf.GGUFValueType.UINT64: "Q",
    gguf.GGUFValueType.INT64: "q",
    gguf.GGUFValueType.FLOAT64: "d",
}
_SUPPORTED_VERSIONS = (2, 3)  # gguf-py's reader's (gguf.gguf_reader.READER_SUPPORTED_VERSIONS)


class _Header:
    """A cursor over a GGUF's bytes in the file's byte order."""

    def __init__(self, data: mmap.mmap, order: str) -> None:
        self.data, self.order, self.offset = data, order, 0

    def scalar(self, fmt: str) -> Any:
        (value,) = struct.unpack_from(self.order + fmt, self.data, self.offset)
        self.offset += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        length = self.scalar("Q")
        start, self.offset = self.offset, self.offset + length
        return bytes(self.data[start : self.offset]).decode("utf-8")

    def value(self, kind: int) -> tuple[bool, Any]:
        """(whether it is kept, the value): scalars and strings are read, arrays stepped over."""
        if kind == gguf.GGUFValueType.STRING:
            return True, self.string()
        if kind == gguf.GGUFValueType.ARRAY:
            item, count = self.scalar("I"), self.scalar("Q")
            if item in _SCALARS:
                self.offset += count * struct.calcsize(_SCALARS[gguf.GGUFValueType(item)])
            else:
                for _ in range(count):
                    self.value(item)
            return False, None
        if kind not in _SCALARS:
            raise ValueError(f"unknown GGUF value type {kind} at byte {self.offset}")
        return True, self.scalar(_SCALARS[gguf.GGUFValueType(kind)])


def _parse(path: Path) -> GGUFMetadata:
    try:
        return _walk(path)
    except (struct.error, UnicodeDecodeError, OverflowError) as exc:
        raise ValueError(f"{path}: the GGUF header is truncated or corrupt ({exc}); write the file again") from None


def _walk(path: Path) -> GGUFMetadata:
    with path.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
        header = _Header(data, "<")
        if header.scalar("I") != gguf.GGUF_MAGIC:
            raise ValueError(f"{path}: not a GGUF file (its magic is not {gguf.GGUF_MAGIC:#x})")
        version = header.scalar("I")
        if version & 0xFFFF == 0:  # written for the other byte order (as gguf-py's reader tells it)
            header.order = ">" if sys.byteorder == "little" else "<"
            version = struct.unpack(header.order + "I", struct.pack("<I", version))[0]
        if version not in _SUPPORTED_VERSIONS:
            raise ValueError(f"{path}: GGUF version {version}; genguard reads versions 2 and 3")
        tensors, count = header.scalar("Q"), header.scalar("Q")
        fields: dict[str, Any] = {"GGUF.version": version, "GGUF.tensor_count": tensors, "GGUF.kv_count": count}
        for _ in range(count):
            key = header.string()
            kept, value = header.value(header.scalar("I"))
            if kept:
                fields[key] = value
        rope: tuple[int, tuple[int, ...], int] | None = None  # (type, dims, offset) of the rope factors
        for _ in range(tensors):
            name = header.string()
            dims = tuple(header.scalar("Q") for _ in range(header.scalar("I")))
            kind, offset = header.scalar("I"), header.scalar("Q")
            if name == ROPE_FREQS:
                rope = (kind, dims, offset)
        factors = None
        if rope is not None:
            factors = _rope_factors(data, header, fields, rope, path)
    return GGUFMetadata(MappingProxyType(fields), factors)


def _rope_factors(
    data: mmap.mmap, header: _Header, fields: dict[str, Any], rope: tuple[int, tuple[int, ...], int], path: Path
) -> tuple[float, ...]:
    """The float32 values of `ROPE_FREQS`, read from the data section after the header's padding."""
    kind, dims, offset = rope
    if kind != gguf.GGMLQuantizationType.F32:
        raise ValueError(f"{path}: {ROPE_FREQS} is {gguf.GGMLQuantizationType(kind).name}, not F32")
    alignment = int(fields.get("general.alignment", gguf.GGUF_DEFAULT_ALIGNMENT))
    start = -(-header.offset // alignment) * alignment + offset
    count = 1
    for d in dims:
        count *= d
    values = array("f")
    values.frombytes(data[start : start + 4 * count])
    if (header.order == ">") != (sys.byteorder == "big"):
        values.byteswap()
    return tuple(float(x) for x in values)
