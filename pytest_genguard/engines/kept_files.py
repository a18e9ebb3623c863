"""What a process read from a file, kept per state of the file: a GGUF is read whole by gguf-py's reader (seconds for
a real model's vocabulary) while a test session, or ``pytest --genguard-gguf``, asks the same few files again and
again. The key is a file's identity and state (`core.file_states`: device, inode, size, modification and change
times): an edit in place, a copy over it or a new file under the name is another state, so it is read again. One rule
for every such reader, `gguf_metadata.read_metadata` and `gguf_transformers.gguf_config_and_tokenizer`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

from pytest_genguard.core.file_states import FileState, file_state, settled

__all__ = ["KeptPerState"]

T = TypeVar("T")

State = tuple[FileState, ...]


@dataclass
class KeptPerState(Generic[T]):
    """The last `size` values read, each kept with the state of the files it was read from."""

    size: int
    _kept: dict[Path, tuple[State, T]] = field(default_factory=dict)

    def get(self, path: Path, read: Callable[[], T], *, also: Sequence[Path] = ()) -> T:
        """`read()`'s value for `path` as it is now (and `also`: other files or folders the value depends on): kept
        while their states stay; not kept when one changed while it was read or within the last
        `core.file_states.RACY_NS`."""
        paths = (path, *also)
        state = tuple(file_state(p) for p in paths)
        kept = self._kept.get(path)
        if kept is not None and kept[0] == state:
            return kept[1]
        value = read()
        if tuple(file_state(p) for p in paths) == state and settled(state):
            self._kept.pop(path, None)
            self._kept[path] = (state, value)
            while len(self._kept) > self.size:
                del self._kept[next(iter(self._kept))]  # the first kept
        return value
