"""``check-server --write-trace DIR``: every server trace kept as a ``.genguard`` file named after its snapshot, to
review afterwards (``genguard show``, ``diff``, ``fidelity``, ``report``) or to pass to another gate.

Names: each snapshot's path relative to the folder all the judged snapshots share, under DIR (one snapshot file:
``DIR/<its name>``), so two snapshots of the same name in two folders never collide. Files are written atomically
(`core.files.atomic_write_text`). An existing file is replaced only when it is our own earlier output (a trace whose
environment names a ``server``: what `record_server` writes); anything else (a snapshot, a transformers trace, a file
that is not a trace) is refused before any request, naming the file: DIR must not be the snapshots' own folder.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from pytest_genguard.core.documents import parse_document
from pytest_genguard.core.errors import TraceFormatError
from pytest_genguard.core.files import atomic_write_text
from pytest_genguard.core.trace import GenerationTrace

__all__ = ["is_server_trace", "trace_paths", "write_trace"]


def trace_paths(folder: Path, labels: Sequence[str]) -> list[Path]:
    """Where each snapshot's server trace goes under `folder` (see the module docstring); a `ValueError` naming the
    file when one exists and is not our own earlier output."""
    sources = [Path(label).resolve() for label in labels]
    common = Path(os.path.commonpath([s.parent for s in sources])) if sources else folder
    paths = [folder / source.relative_to(common) for source in sources]
    for label, path in zip(labels, paths, strict=True):
        if path.resolve() in sources:
            raise ValueError(
                f"--write-trace {folder}: {path} is a snapshot being judged ({label}); write the server's traces to "
                "another folder"
            )
        if path.exists() and not is_server_trace(path):
            raise ValueError(
                f"--write-trace {folder}: {path} exists and is not a server trace genguard wrote; it is never "
                "overwritten: choose another folder, or move the file away"
            )
    return paths


def is_server_trace(path: Path) -> bool:
    """Whether `path` holds a trace a server gave (environment ``server``): the only file `--write-trace` replaces."""
    try:
        document = parse_document(path.read_text(encoding="utf-8"), str(path))
    except (OSError, UnicodeDecodeError, TraceFormatError):
        return False
    return isinstance(document, GenerationTrace) and "server" in document.environment


def write_trace(path: Path, trace: GenerationTrace) -> None:
    """Write `trace` at `path`, whole or not at all."""
    atomic_write_text(path, trace.to_json())
