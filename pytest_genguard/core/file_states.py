"""A file's identity and state, and when a value read from it may be kept: the one rule of every reader that keeps
what it read per state of its files (the engines' `kept_files`, the weights hash of an offloaded model's weight
files). An edit in place, a copy over the file or a new file under its name is another state."""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path

__all__ = ["RACY_NS", "FileState", "file_state", "settled"]

RACY_NS = 2_000_000_000
"""A file written this recently is read again at every call (as git treats a "racily clean" file): a write in the
same tick of the file system's clock (a few milliseconds) as the one the kept state saw would leave its stat alone."""

FileState = tuple[int, ...]


def file_state(path: Path) -> FileState:
    """`path`'s identity and state: device, inode, size, modification and change times (nanoseconds)."""
    st = path.stat()
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def settled(states: Iterable[FileState]) -> bool:
    """Whether a value read from files in these states may be kept: none was modified or changed within the last
    `RACY_NS` (a later write in the same clock tick could not be told apart)."""
    newest = max((max(s[3:]) for s in states), default=0)
    return time.time_ns() - newest > RACY_NS
