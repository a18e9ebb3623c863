"""`genguard report DIR`: every trace file under a folder rendered into one self-contained HTML file;
`genguard report REPORT.html --markdown`: the markdown summary of a run's HTML report (``pytest --genguard-report``),
the same text the plugin appends to GitHub's job summary (`pytest_genguard.core.markdown`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import IO

from pytest_genguard.cli.inputs import EXIT_OK, EXIT_USAGE, CliError, find_trace_files, load_document
from pytest_genguard.core.files import atomic_write_text
from pytest_genguard.core.html import TraceFile, render_trace_files
from pytest_genguard.core.markdown import extract, render_markdown

__all__ = ["add_arguments", "markdown", "report", "run"]

_DEFAULT_HTML = Path("genguard-report.html")


def report(folder: Path, output: Path, *, stream: IO[str] | None = None) -> int:
    """Render every trace file under `folder` into one HTML file; unreadable traces are listed and fail the command."""

    if not folder.exists():
        raise CliError(f"{folder}: no such folder")
    if not folder.is_dir():
        raise CliError(f"{folder}: not a folder (to look at one trace file use: genguard show {folder})")
    paths = find_trace_files(folder)
    if not paths:
        raise CliError(
            f"{folder}: no trace files found (trace files are JSON written by pytest-genguard, in __snapshots__ "
            "folders after pytest --snapshot-update)"
        )
    entries = []
    for path in paths:
        shown = str(path.relative_to(folder))
        try:
            entries.append(TraceFile(shown, traces=load_document(path).traces))
        except CliError as exc:
            entries.append(TraceFile(shown, error=str(exc)))
    try:
        atomic_write_text(output, render_trace_files(entries, root=str(folder)))
    except OSError as exc:
        raise CliError(f"{output}: cannot write the report: {exc.strerror or exc}") from None
    out = stream if stream is not None else sys.stdout
    bad = [e for e in entries if e.error is not None]
    out.write(f"wrote {output}: {len(entries) - len(bad)} traces from {folder}\n")
    for entry in bad:
        sys.stderr.write(f"genguard: unreadable trace: {entry.error}\n")
    return EXIT_USAGE if bad else EXIT_OK


def markdown(page: Path, output: Path | None, *, stream: IO[str] | None = None) -> int:
    """Write the markdown summary a run's HTML report carries to `output` (None or ``-``: `stream`, stdout)."""
    if page.is_dir():
        raise CliError(f"{page}: is a folder; --markdown reads a run's HTML report (pytest --genguard-report FILE)")
    try:
        text = page.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CliError(f"{page}: no such file (write it with: pytest --genguard-report {page})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"{page}: cannot read: {exc}") from None
    try:
        summary = extract(text, str(page))
    except ValueError as exc:
        raise CliError(str(exc)) from None
    rendered = render_markdown(summary) + "\n"
    if output is None or str(output) == "-":
        (stream if stream is not None else sys.stdout).write(rendered)
        return EXIT_OK
    try:
        atomic_write_text(output, rendered)
    except OSError as exc:
        raise CliError(f"{output}: cannot write the summary: {exc.strerror or exc}") from None
    return EXIT_OK


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The subcommand's arguments."""
    p.add_argument("folder", type=Path, metavar="PATH", help="a folder of traces; with --markdown, a run's HTML report")
    p.add_argument(
        "-o",
        "--output",
        type=Path,
        default=None,
        help=f"the file to write (default: {_DEFAULT_HTML}; with --markdown, the standard output)",
    )
    p.add_argument(
        "--markdown",
        action="store_true",
        help="write the markdown summary of a run's HTML report (pytest --genguard-report) instead",
    )


def run(args: argparse.Namespace) -> int:
    """`genguard report` with parsed arguments."""
    if args.markdown:
        return markdown(args.folder, args.output)
    return report(args.folder, args.output or _DEFAULT_HTML)
