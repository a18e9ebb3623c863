"""The `genguard` console script: look at a trace, compare two traces, render a snapshots folder as HTML, bisect the
release that changed a snapshot test (`genguard bisect`, exit codes in `pytest_genguard.bisection.report`), judge a
running server against snapshots (`genguard check-server`, exit codes in `pytest_genguard.serving.check`).

`genguard fidelity` says how far a candidate trace is from a reference trace (the KLD lower bound of
`pytest_genguard.core.fidelity`) and judges it by a budget.

One module per subcommand (`show`, `diff`, `fidelity`, `report`, `review`, `bisect_command`, `check_server`,
`check_gguf`, `gate`),
each with `add_arguments(parser)` and `run(args)`; `inputs` holds what they share. This module only wires them, from
one table (`SUBCOMMANDS`: each subcommand's module and help line), and imports a subcommand's module only when that
subcommand runs: `genguard show` reads one JSON file, and loads neither the HTTP side nor the engines to do it
(`genguard --help` lists every subcommand from the table alone).

Exit codes: 0 when the command did its job (for `diff`: the comparison holds; for `fidelity`: within the budget),
1 when `diff` finds a regression or a stale trace (`fidelity`: outside the budget), 2 for bad input (a missing or
unreadable file, a corrupt trace, wrong arguments), 4 for `fidelity` and `check-server --budget` within a budget on
lower bounds only (`pytest_genguard.core.gate`). Never a traceback for bad input: the message names the file and
what to do. Torch-free: reading traces needs only the standard library.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from pytest_genguard.cli.inputs import EXIT_FAILED, EXIT_OK, EXIT_USAGE, CliError

__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "SUBCOMMANDS", "CliError", "Subcommand", "build_parser", "main"]


@dataclass(frozen=True)
class Subcommand:
    """A subcommand: the module that defines its `add_arguments(parser)` and `run(args)`, and its help line."""

    module: str
    help: str

    def load(self) -> ModuleType:
        """The subcommand's module, imported now."""
        return importlib.import_module(self.module)


SUBCOMMANDS: dict[str, Subcommand] = {
    "show": Subcommand("pytest_genguard.cli.show", "print a trace as a table: tokens, top-k, margins"),
    "diff": Subcommand("pytest_genguard.cli.diff", "compare two traces (exit 0 when they agree, 1 when not)"),
    "fidelity": Subcommand(
        "pytest_genguard.cli.fidelity",
        "how far a candidate trace is from a reference (KLD lower bound; exit 0 within, 1 outside, 4 unproven)",
    ),
    "bisect": Subcommand(
        "pytest_genguard.cli.bisect_command",
        "name the release that changed a snapshot test's verdict (exit 0 found, 1 no change, 3 inconclusive)",
    ),
    "check-server": Subcommand(
        "pytest_genguard.cli.check_server",
        "judge a running server (vLLM, llama-server) against snapshots (exit 0 hold, 1 regression or outside the "
        "budget, 2 bad input, 3 stale, 4 unproven)",
    ),
    "check-gguf": Subcommand(
        "pytest_genguard.cli.check_gguf",
        "judge a GGUF file through llama.cpp against snapshots (exit 0 within, 1 outside, 2 bad input, 3 stale, 4 "
        "unproven)",
    ),
    "report": Subcommand(
        "pytest_genguard.cli.report",
        "render every trace under a folder into one HTML file (--markdown: a run report's summary as markdown)",
    ),
    "review": Subcommand(
        "pytest_genguard.cli.review",
        "accept or reject the new traces a failed test run kept, without running the model again (exit 0 done, 1 "
        "an accept refused, 2 bad input)",
    ),
    "gate": Subcommand(
        "pytest_genguard.cli.gate",
        "build the project's gate image and run its decoding tests in it (exit 0 passed, 1 failed, 2 could not run)",
    ),
}
"""Each subcommand by name, in the order `genguard --help` lists them."""


class _SubcommandParser(argparse.ArgumentParser):
    """A subcommand's parser that adds its arguments (importing the subcommand's module) the first time it parses or
    shows its help: argparse asks only the chosen subcommand's parser to parse."""

    def __init__(self, *args: Any, subcommand: Subcommand, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.subcommand = subcommand
        self.module: ModuleType | None = None

    def load(self) -> ModuleType:
        """The subcommand's module, its arguments added to this parser (once)."""
        if self.module is None:
            self.module = self.subcommand.load()
            self.module.add_arguments(self)
        return self.module

    def parse_known_args(  # type: ignore[override]  # typeshed overloads the namespace; argparse passes one or None
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self.load()
        return super().parse_known_args(args, namespace)

    def format_usage(self) -> str:
        self.load()
        return super().format_usage()

    def format_help(self) -> str:
        self.load()
        return super().format_help()


def build_parser(*, full: bool = False) -> argparse.ArgumentParser:
    """The `genguard` parser: one subparser per entry of `SUBCOMMANDS`, whose arguments are added when it parses
    (only the subcommand that runs imports its module); `full=True` adds every subcommand's arguments now (for
    tools that read the whole parser, such as the docs' check)."""
    parser = argparse.ArgumentParser(
        prog="genguard", description="Look at and compare pytest-genguard trace files (snapshots, references)."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=_SubcommandParser)
    for name, subcommand in SUBCOMMANDS.items():
        subparser = sub.add_parser(name, help=subcommand.help, subcommand=subcommand)
        if full:
            subparser.load()
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `genguard` console script; returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error argparse already printed
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    run = SUBCOMMANDS[args.command].load().run
    try:
        code: int = run(args)
        return code
    except CliError as exc:
        sys.stderr.write(f"genguard {args.command}: {exc}\n")
        return EXIT_USAGE
    except BrokenPipeError:  # `genguard show big.json | head`
        sys.stderr.close()
        return EXIT_OK
