"""`genguard gate`: build the project's gate image and run its decoding tests in it (exit 0 passed, 1 failed, 2 the
gate could not run: no docker daemon, a base without torch, no tests, no GPU runtime for `--gpu`, bad input).
The work is `pytest_genguard.gate`'s (standard library, filelock and platformdirs: no torch on the host)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pytest_genguard.cli.inputs import CliError
from pytest_genguard.gate.dockerfile import DEFAULT_BASE
from pytest_genguard.gate.errors import GateError
from pytest_genguard.gate.run import GateOptions, print_dockerfile, run_gate

__all__ = ["add_arguments", "run"]


def _names(value: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in value.split(",") if part.strip())


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The subcommand's arguments."""
    p.add_argument("--gpu", action="store_true", help="run on the GPU (docker run --gpus all, --genguard-gpu)")
    p.add_argument("--base", default=DEFAULT_BASE, metavar="IMAGE", help="the base image: Python and torch installed")
    p.add_argument(
        "--artifacts", type=Path, default=Path("gate-artifacts"), metavar="DIR", help="where the reports land"
    )
    p.add_argument("--extras", type=_names, default=(), metavar="A,B", help="the project's extras to install")
    p.add_argument("--requirements", action="append", default=[], metavar="FILE", help="a requirements file")
    p.add_argument("--models", type=Path, action="append", default=[], metavar="DIR", help="mount a folder read-only")
    p.add_argument("--hf-cache", type=Path, metavar="DIR", help="mount a Hugging Face cache read-only")
    p.add_argument("--pip-index", action="store_true", help="pip inside the build reaches the package index")
    p.add_argument("--project", type=Path, default=Path("."), metavar="DIR", help="the project's root")
    p.add_argument("--file", type=Path, metavar="DOCKERFILE", help="build your own copy of the gate's Dockerfile")
    p.add_argument("--dockerfile", action="store_true", help="print the Dockerfile genguard gate builds, and exit")
    p.add_argument("pytest_args", nargs=argparse.REMAINDER, metavar="-- ARGS", help="pytest arguments for the run")


def run(args: argparse.Namespace) -> int:
    """`genguard gate` with parsed arguments."""
    pytest_args = list(args.pytest_args)
    if pytest_args[:1] == ["--"]:
        pytest_args = pytest_args[1:]
    elif pytest_args:
        raise CliError(f"gate: put pytest's arguments after --: genguard gate -- {' '.join(pytest_args)}")
    try:
        if args.dockerfile:
            return print_dockerfile(args.project, args.extras, args.requirements, sys.stdout)
        options = GateOptions(
            project=args.project,
            base=args.base,
            gpu=args.gpu,
            artifacts=args.artifacts,
            extras=args.extras,
            requirements=tuple(args.requirements),
            models=tuple(args.models),
            hf_cache=args.hf_cache,
            pip_index=args.pip_index,
            file=args.file,
            pytest_args=tuple(pytest_args),
        )
        return run_gate(options)
    except GateError as exc:
        raise CliError(str(exc)) from None
