"""A GGUF's metadata, read once per state of the file. gguf-py's ``GGUFReader`` parses every field when it opens a
file, the vocabulary's strings and merges included (98,000 strings for SmolLM2-135M: 5 to 14 s a read on a 2-core
machine), while genguard asks the same file for its type (the judgement, each trace's environment), its chat
template and its hyperparameters (each snapshot's conformance checks): ``--genguard-gguf`` and ``genguard
check-gguf`` read it four times per snapshot before this. What is kept is what those checks read, keyed by the
file's identity and state (device, inode, size, modification and change times: an edit in place, a copy over it or
a new file under the name is another key); kept for the few files a process judges.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import gguf

__all__ = ["GGUFMetadata", "read_metadata"]

RACY_NS = 2_000_000_000
"""A file written this recently is parsed again at every read (as git treats a "racily clean" file): a write in the
same tick of the file system's clock (a few milliseconds) as the one the kept state saw would leave its stat alone."""
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


_KEPT: dict[Path, tuple[tuple[int, ...], GGUFMetadata]] = {}


def read_metadata(path: Path | str) -> GGUFMetadata:
    """`path`'s metadata, parsed once per state of the file (another file under the name, or an edit, is read
    again; a file written while it was read, or in the last `RACY_NS`, is not kept)."""
    resolved = Path(path).resolve()
    state = _state(resolved)
    kept = _KEPT.get(resolved)
    if kept is not None and kept[0] == state:
        return kept[1]
    metadata = _parse(resolved)
    if _state(resolved) == state and time.time_ns() - max(state[3:]) > RACY_NS:
        _KEPT.pop(resolved, None)
        _KEPT[resolved] = (state, metadata)
        while len(_KEPT) > KEPT_FILES:
            del _KEPT[next(iter(_KEPT))]  # the first kept
    return metadata


def _state(path: Path) -> tuple[int, ...]:
    st = path.stat()
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _parse(path: Path) -> GGUFMetadata:
    reader = gguf.GGUFReader(str(path))
    fields = {
        key: field.contents()
        for key, field in reader.fields.items()
        if not (field.types and field.types[0] == gguf.GGUFValueType.ARRAY)
    }
    rope = [t for t in reader.tensors if t.name == ROPE_FREQS]
    factors = tuple(float(x) for x in rope[0].data.reshape(-1)) if rope else None
    return GGUFMetadata(MappingProxyType(fields), factors)
