"""What every `genguard` subcommand shares: its exit codes, `CliError` (bad input, exit 2), reading trace files (each
way one can be wrong named with the file), finding them under a folder, and the numeric argument type.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from pytest_genguard.core.documents import parse_document
from pytest_genguard.core.errors import TraceFormatError
from pytest_genguard.core.history import RecorderHistory
from pytest_genguard.core.trace import GenerationTrace

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_USAGE",
    "CliError",
    "Document",
    "console",
    "find_trace_files",
    "load_document",
    "load_trace",
    "tolerance",
]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

# Folders never searched for traces (version control, caches, virtual environments).
_SKIP_DIRS = frozenset({".git", ".hg", ".svn", "__pycache__", ".pytest_cache", ".mypy_cache", ".venv", "node_modules"})
_MAX_TRACE_BYTES = 256 * 1024 * 1024


class CliError(Exception):
    """Bad input: printed as `genguard: <message>` with exit code 2, never as a traceback."""


def _read_text(path: Path) -> str:
    if not path.exists():
        raise CliError(f"{path}: no such file")
    if path.is_dir():
        raise CliError(f"{path}: is a folder, not a trace file (for a folder of snapshots use: genguard report DIR)")
    try:
        size = path.stat().st_size
        if size > _MAX_TRACE_BYTES:
            raise CliError(f"{path}: {size} bytes is too large to be a trace file")
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CliError(
            f"{path}: not UTF-8 text (byte {exc.start}); a trace file is JSON text written by pytest-genguard"
        ) from None
    except OSError as exc:
        raise CliError(f"{path}: cannot read: {exc.strerror or exc}") from None


@dataclass(frozen=True)
class Document:
    """A trace file or a recorder history file (``recorder.history`` snapshots), read and parsed."""

    path: Path
    text: str
    traces: tuple[tuple[str, GenerationTrace], ...]
    """(label, trace) pairs: one unlabelled trace, or one per checkpoint of a history."""
    is_history: bool


def _checkpoint_label(index: int, step: int, event: str, loss: float | None) -> str:
    return f"checkpoint {index}: step {step}, {event}" + (f", loss {loss:.4g}" if loss is not None else "")


def load_document(path: Path) -> Document:
    """Read a trace or history file, turning every way it can be wrong into a `CliError` that names the file."""
    text = _read_text(path)
    try:
        document = parse_document(text, str(path))
    except TraceFormatError as exc:
        raise CliError(str(exc)) from None
    if isinstance(document, RecorderHistory):
        labelled = tuple((_checkpoint_label(i, c.step, c.event, c.loss), c.trace) for i, c in enumerate(document))
        return Document(path, text, labelled, is_history=True)
    return Document(path, text, (("", document),), is_history=False)


def load_trace(path: Path) -> GenerationTrace:
    """Read a trace file (not a history); bad input raises `CliError`."""
    doc = load_document(path)
    if doc.is_history:
        raise CliError(f"{path}: is a recorder history, not a single trace")
    return doc.traces[0][1]


def find_trace_files(folder: Path) -> list[Path]:
    """Files under `folder` that look like traces (JSON objects with a "schema" key), sorted; hidden folders skipped."""
    found = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith("."))
        for name in sorted(files):
            path = Path(root) / name
            try:
                with path.open("rb") as fh:
                    head = fh.read(64)
            except OSError:
                continue
            if head.lstrip().startswith(b"{") and (b'"schema"' in head or b'"genguard_history"' in head):
                found.append(path)
    return found


def tolerance(text: str) -> float:
    """argparse type of a tolerance or a timeout: a finite number >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number (write e.g. 1e-5)") from None
    if not value >= 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number >= 0")
    return value


def console(stream: IO[str] | None = None) -> Console:
    """A rich console: colours only on a terminal and without NO_COLOR; wide tables when writing to a pipe."""
    from rich.console import Console  # rich only where a command draws: `genguard diff` does without it

    out = stream if stream is not None else sys.stdout
    probe = Console(file=out)
    width = None if probe.is_terminal or os.environ.get("COLUMNS") else 160
    plain = bool(os.environ.get("NO_COLOR"))  # no colours and no bold/dim either: https://no-color.org
    return Console(file=out, width=width, highlight=False, soft_wrap=False, color_system=None if plain else "auto")
