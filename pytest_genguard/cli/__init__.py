"""The `genguard` console script: look at a trace, compare two traces, render a snapshots folder as HTML, bisect the
release that changed a snapshot test (`genguard bisect`, exit codes in `pytest_genguard.bisection.report`), judge a
running server against snapshots (`genguard check-server`, exit codes in `pytest_genguard.serving.check`).

`genguard fidelity` says how far a candidate trace is from a reference trace (the KLD lower bound of
`pytest_genguard.core.fidelity`) and judges it by a budget.

One module per subcommand (`show`, `diff`, `fidelity`, `report`, `bisect_command`, `check_server`, `check_gguf`),
each with its `HELP`, `add_arguments(parser)` and `run(args)`; `inputs` holds what they share. This module only wires
them.

Exit codes: 0 when the command did its job (for `diff`: the comparison holds; for `fidelity`: within the budget),
1 when `diff` finds a regression or a stale trace (`fidelity`: outside the budget), 2 for bad input (a missing or
unreadable file, a corrupt trace, wrong arguments), 4 for `fidelity` and `check-server --budget` within a budget on
lower bounds only (`pytest_genguard.core.gate`). Never a traceback for bad input: the message names the file and
what to do. Torch-free: reading traces needs only the standard library.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from types import ModuleType

from pytest_genguard.cli import bisect_command, check_gguf, check_server, diff, fidelity, report, show
from pytest_genguard.cli.inputs import EXIT_FAILED, EXIT_OK, EXIT_USAGE, CliError

__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "SUBCOMMANDS", "CliError", "build_parser", "main"]

SUBCOMMANDS: dict[str, ModuleType] = {
    "show": show,
    "diff": diff,
    "fidelity": fidelity,
    "bisect": bisect_command,
    "check-server": check_server,
    "check-gguf": check_gguf,
    "report": report,
}
"""Each subcommand's module, in the order `genguard --help` lists them."""


def build_parser() -> argparse.ArgumentParser:
    """The `genguard` parser: one subparser per module of `SUBCOMMANDS`."""
    parser = argparse.ArgumentParser(
        prog="genguard", description="Look at and compare pytest-genguard trace files (snapshots, references)."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module in SUBCOMMANDS.items():
        module.add_arguments(sub.add_parser(name, help=module.HELP))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `genguard` console script; returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error argparse already printed
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    run: Callable[[argparse.Namespace], int] = SUBCOMMANDS[args.command].run
    try:
        return run(args)
    except CliError as exc:
        sys.stderr.write(f"genguard {args.command}: {exc}\n")
        return EXIT_USAGE
    except BrokenPipeError:  # `genguard show big.json | head`
        sys.stderr.close()
        return EXIT_OK
