"""`genguard check-server URL SNAPSHOT...`: every trace snapshot judged against a running server (exit codes in
`pytest_genguard.serving.check`). Needs neither torch nor transformers: the HTTP side loads for this command only."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from pytest_genguard.cli.inputs import CliError, find_trace_files, load_document, tolerance
from pytest_genguard.core.trace import GenerationTrace

__all__ = ["HELP", "add_arguments", "check_server_command", "run"]

HELP = "judge a running server (vLLM) against snapshots (exit 0 hold, 1 regression, 2 bad input, 3 stale)"


def check_server_command(
    url: str, paths: Sequence[Path], *, model: str | None, dtype: str | None, timeout: float
) -> int:
    """`genguard check-server`: every trace snapshot in `paths` (files, or folders searched for them) judged against
    the server at `url`; exit codes in `pytest_genguard.serving.check`. Needs neither torch nor transformers."""
    from pytest_genguard.core.errors import ServerError  # the HTTP side loads for this command only
    from pytest_genguard.serving.check import check_traces
    from pytest_genguard.serving.http import Endpoint

    traces: list[tuple[str, GenerationTrace]] = []
    for path in paths:
        files = find_trace_files(path) if path.is_dir() else [path]
        if path.is_dir() and not files:
            raise CliError(f"{path}: no trace files found (snapshots are .genguard files under __snapshots__)")
        for file in files:
            doc = load_document(file)
            if doc.is_history:
                raise CliError(f"{file}: a recorder history; check-server judges trace snapshots")
            traces.append((str(file), doc.traces[0][1]))
    try:
        return check_traces(Endpoint.from_env(url, timeout=timeout), traces, model=model, dtype=dtype, out=sys.stdout)
    except (ServerError, ValueError) as exc:
        raise CliError(str(exc)) from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The subcommand's arguments."""
    p.add_argument("url", metavar="URL", help="the server's base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("paths", type=Path, nargs="+", metavar="SNAPSHOT", help="a .genguard file or a folder of them")
    p.add_argument("--model", default=None, help="the served model's name (default: the one it serves)")
    p.add_argument(
        "--dtype",
        default=None,
        choices=("float32", "float16", "bfloat16"),
        help="the dtype the server computes in, when it does not report it (default: inferred from the logprobs)",
    )
    p.add_argument("--timeout", type=tolerance, default=120.0, help="seconds per request (default: 120)")


def run(args: argparse.Namespace) -> int:
    """`genguard check-server` with parsed arguments."""
    return check_server_command(args.url, args.paths, model=args.model, dtype=args.dtype, timeout=args.timeout)
