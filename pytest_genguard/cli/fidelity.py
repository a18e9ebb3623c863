"""`genguard fidelity REFERENCE CANDIDATE`: how far a candidate trace is from a reference trace (the KLD lower bound
of `pytest_genguard.core.fidelity`), judged by a budget; exit codes in `pytest_genguard.core.gate` (0 within, 1
outside, 2 bad input, 4 unproven: within on lower bounds only)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import IO

from pytest_genguard.cli.inputs import EXIT_OK, CliError, load_trace
from pytest_genguard.core.budget import parse_budget, traces_report
from pytest_genguard.core.gate import STATUS_EXIT, gate_line

__all__ = ["add_arguments", "fidelity", "run"]


def fidelity(
    reference_path: Path, candidate_path: Path, *, budget: str | None, as_json: bool, stream: IO[str] | None = None
) -> int:
    """How far a candidate trace is from a reference trace (lower bounds: the files hold top-k only); with a budget,
    exit 0 within it (proven), 1 outside it (proven), 4 within on lower bounds only; without one, 0."""
    try:
        limits = None if budget is None else parse_budget(budget)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    reference = load_trace(reference_path)
    candidate = load_trace(candidate_path)
    report = traces_report(reference, candidate, limits)
    if not report.steps:
        raise CliError(
            f"{candidate_path}: shares no prompt with {reference_path}; record the candidate on the reference's prompts"
        )
    out = stream if stream is not None else sys.stdout
    if as_json:
        out.write(json.dumps(report.to_json(), indent=2) + "\n")
    else:
        gate = f"\nbudget {limits.name}: {gate_line(report)}" if limits is not None else ""
        out.write(f"{reference_path} -> {candidate_path}\n{report}{gate}\n")
    return EXIT_OK if limits is None else STATUS_EXIT[report.status]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The subcommand's arguments."""
    p.add_argument("reference", type=Path, metavar="REFERENCE")
    p.add_argument("candidate", type=Path, metavar="CANDIDATE")
    p.add_argument(
        "--budget",
        default=None,
        metavar="PRESET|KEY=VALUE,...",
        help="a preset (bf16, fp16, int8, int4; a GGUF's gguf-q8_0, gguf-q6_k, gguf-q4_k_m, gguf-q4_1) or limits "
        "(exit 0 within, 1 outside, 4 unproven)",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args: argparse.Namespace) -> int:
    """`genguard fidelity` with parsed arguments."""
    return fidelity(args.reference, args.candidate, budget=args.budget, as_json=args.json)
