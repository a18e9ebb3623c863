"""`genguard check-server URL SNAPSHOT...`: every trace snapshot judged against a running server, by the comparison
rule or by a fidelity budget (exit codes in `pytest_genguard.serving.check`: 0 holds, 1 regression or outside, 2 bad
input, 3 stale, 4 unproven). Needs neither torch nor transformers: the HTTP side loads for this command only."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from pytest_genguard.cli.inputs import CliError, find_trace_files, load_document, tolerance
from pytest_genguard.core.budget import parse_budget
from pytest_genguard.core.trace import GenerationTrace
from pytest_genguard.serving.servers import SERVER_KINDS

__all__ = ["add_arguments", "check_server_command", "run"]


def _snapshots(paths: Sequence[Path]) -> list[tuple[str, GenerationTrace]]:
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
    return traces


def check_server_command(
    url: str,
    paths: Sequence[Path],
    *,
    model: str | None,
    dtype: str | None,
    timeout: float,
    budget: str | None = None,
    max_logprobs: int | None = None,
    concurrency: int = 4,
    write_trace: Path | None = None,
    load: bool = False,
    server: str = "auto",
    align_sampler: bool = False,
) -> int:
    """`genguard check-server`: every trace snapshot in `paths` (files, or folders searched for them) judged against
    the server at `url`; exit codes in `pytest_genguard.serving.check`. Needs neither torch nor transformers."""
    from pytest_genguard.core.errors import ServerError  # the HTTP side loads for this command only
    from pytest_genguard.serving.check import CheckOptions, check_traces
    from pytest_genguard.serving.http import Endpoint

    try:
        options = CheckOptions(
            model=model,
            dtype=dtype,
            budget=None if budget is None else parse_budget(budget),
            max_logprobs=max_logprobs,
            concurrency=concurrency,
            write_trace=write_trace,
            load=load,
            server=server,
            align_sampler=align_sampler,
        )
    except ValueError as exc:
        raise CliError(str(exc)) from None
    traces = _snapshots(paths)
    try:
        return check_traces(Endpoint.from_env(url, timeout=timeout), traces, out=sys.stdout, options=options)
    except (ServerError, ValueError) as exc:
        raise CliError(str(exc)) from None
    except BrokenPipeError:  # `genguard check-server ... | head`: main() ends quietly
        raise
    except OSError as exc:
        if write_trace is None:
            raise
        raise CliError(f"--write-trace {write_trace}: cannot write: {exc.strerror or exc}") from None


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number (write e.g. 4)") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The subcommand's arguments."""
    p.add_argument("url", metavar="URL", help="the server's base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("paths", type=Path, nargs="+", metavar="SNAPSHOT", help="a .genguard file or a folder of them")
    p.add_argument("--model", default=None, help="the served model's name (default: the one it serves)")
    p.add_argument(
        "--server",
        default="auto",
        choices=SERVER_KINDS,
        help="the server's API: vllm (teacher forced), llama.cpp (llama-server, regenerated) or auto (ask it: default)",
    )
    p.add_argument(
        "--dtype",
        default=None,
        choices=("float32", "float16", "bfloat16"),
        help="the dtype the server computes in, when it does not report it (default: inferred from the logprobs)",
    )
    p.add_argument("--timeout", type=tolerance, default=120.0, help="seconds per request (default: 120)")
    p.add_argument(
        "--budget",
        default=None,
        metavar="PRESET|KEY=VALUE,...",
        help="judge by a fidelity budget (bf16, fp16, int8, int4 or limits) instead of the float rule",
    )
    p.add_argument(
        "--max-logprobs",
        type=_count,
        default=None,
        metavar="N",
        help="logprobs per step to ask for (default with --budget: the most the server allows; else the top-k)",
    )
    p.add_argument("--concurrency", type=_count, default=4, metavar="N", help="requests in flight at once (default: 4)")
    p.add_argument(
        "--write-trace",
        type=Path,
        default=None,
        metavar="DIR",
        help="write each server trace as a .genguard file named after its snapshot under DIR",
    )
    p.add_argument(
        "--load", action="store_true", help="also measure batch variance under concurrent load, per snapshot"
    )
    p.add_argument(
        "--align-sampler",
        action="store_true",
        help="judge sampled snapshots with the request fields that align the server's sampler with transformers' "
        "(llama-server: samplers in transformers' order, repeat_last_n over the whole sequence)",
    )


def run(args: argparse.Namespace) -> int:
    """`genguard check-server` with parsed arguments."""
    return check_server_command(
        args.url,
        args.paths,
        model=args.model,
        dtype=args.dtype,
        timeout=args.timeout,
        budget=args.budget,
        max_logprobs=args.max_logprobs,
        concurrency=args.concurrency,
        write_trace=args.write_trace,
        load=args.load,
        server=args.server,
        align_sampler=args.align_sampler,
    )
