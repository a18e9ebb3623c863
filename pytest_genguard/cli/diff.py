"""`genguard diff EXPECTED ACTUAL`: two trace (or history) files compared by the rule the tests use; the pytest
failure text printed, exit 0 when they agree and 1 when not."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import IO

from pytest_genguard.cli.inputs import EXIT_FAILED, EXIT_OK, CliError, load_document, tolerance
from pytest_genguard.core.compare import compare
from pytest_genguard.core.documents import compare_documents
from pytest_genguard.core.tolerances import Overrides

__all__ = ["add_arguments", "diff", "run"]


def diff(
    expected_path: Path,
    actual_path: Path,
    *,
    atol: float | None = None,
    rtol: float | None = None,
    tie_tol: float | None = None,
    check_fingerprints: bool = True,
    stream: IO[str] | None = None,
) -> int:
    """Compare two trace (or history) files with the rule the tests use; print the pytest failure text."""
    overrides = Overrides(atol=atol, rtol=rtol, tie_tol=tie_tol)
    expected = load_document(expected_path)
    actual = load_document(actual_path)
    if expected.is_history != actual.is_history:
        kinds = {True: "a recorder history", False: "a trace"}
        raise CliError(
            f"{expected_path} is {kinds[expected.is_history]} but {actual_path} is {kinds[actual.is_history]}; "
            "compare files of the same kind"
        )
    try:
        if expected.is_history:
            outcome = compare_documents(actual.text, expected.text, overrides=overrides, source=str(expected_path))
            ok, text = outcome.ok, outcome.detail
        else:
            comparison = compare(
                expected.traces[0][1], actual.traces[0][1], check_fingerprints=check_fingerprints, **overrides.args()
            )
            ok, text = comparison.ok, str(comparison)
    except ValueError as exc:  # a tolerance compare() rejects
        raise CliError(str(exc)) from None
    out = stream if stream is not None else sys.stdout
    out.write(f"{expected_path} -> {actual_path}\n{text}\n")
    return EXIT_OK if ok else EXIT_FAILED


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The subcommand's arguments."""
    p.add_argument("expected", type=Path, metavar="EXPECTED")
    p.add_argument("actual", type=Path, metavar="ACTUAL")
    p.add_argument("--atol", type=tolerance, default=None, help="absolute tolerance (default: by dtype)")
    p.add_argument("--rtol", type=tolerance, default=None, help="relative tolerance (default: by dtype)")
    p.add_argument("--tie-tol", type=tolerance, default=None, help="near-tie gap (default: by dtype)")
    p.add_argument(
        "--ignore-fingerprints", action="store_true", help="compare traces of two different models on purpose"
    )


def run(args: argparse.Namespace) -> int:
    """`genguard diff` with parsed arguments."""
    return diff(
        args.expected,
        args.actual,
        atol=args.atol,
        rtol=args.rtol,
        tie_tol=args.tie_tol,
        check_fingerprints=not args.ignore_fingerprints,
    )
