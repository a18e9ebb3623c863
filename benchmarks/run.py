"""Run every figure of the performance budget and write the table: `python -m benchmarks` or
`python benchmarks/run.py [--smoke] [--only NAME ...] [--out PATH]`.

A full run (no `--only`, no `--smoke`) writes benchmarks/RESULTS.md; other runs print the table and write only to an
explicit `--out`. A figure that fails to run becomes an "error" row and the exit status is 1.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable from the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import harness
from benchmarks.harness import Result, loadavg, now, render, write_atomic

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"

# name -> (module, function). The suite runs last: it is the longest and would disturb the others' timings.
FIGURES: dict[str, tuple[str, str]] = {
    "verify": ("benchmarks.verify_speed", "run"),
    "record": ("benchmarks.record_overhead", "run"),
    "recorder": ("benchmarks.recorder_overhead", "run"),
    "recorder_eval": ("benchmarks.recorder_eval_overhead", "run"),
    "finetune": ("benchmarks.finetune_cache", "run"),
    "finetune_startup": ("benchmarks.finetune_startup", "run"),
    "startup": ("benchmarks.startup", "run"),
    "cli": ("benchmarks.cli_startup", "run"),
    "compare": ("benchmarks.snapshot_cost", "run_compare"),
    "size": ("benchmarks.snapshot_cost", "run_size"),
    "engines": ("benchmarks.engine_speed", "run"),
    "large_vocab": ("benchmarks.large_vocab", "run"),
    "fidelity": ("benchmarks.fidelity", "run"),
    "real_model": ("benchmarks.real_model", "run"),
    "offload": ("benchmarks.offload", "run"),
    "server_gate": ("benchmarks.server_gate", "run"),
    "suite": ("benchmarks.suite_time", "run"),
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one or two repeats: checks the scripts run")
    parser.add_argument(
        "--only", action="append", choices=sorted(FIGURES), metavar="NAME", help=f"run one figure: {', '.join(FIGURES)}"
    )
    parser.add_argument("--out", type=Path, help="write the markdown table here (default: RESULTS.md on a full run)")
    parser.add_argument(
        "--threads",
        type=int,
        metavar="N",
        help="torch (and OpenMP) threads, here and in subprocesses (default: torch's own; --smoke: 1)",
    )
    return parser


def _run_one(name: str, smoke: bool) -> list[Result]:
    module, function = FIGURES[name]
    try:
        fn: Callable[[bool], list[Result]] = getattr(importlib.import_module(module), function)
        return fn(smoke)
    except Exception as exc:  # one broken figure must not hide the others
        traceback.print_exc()
        return [Result(name, f"{name} (error)", "-", None, "", f"error: {type(exc).__name__}: {exc}", False)]


def _set_threads(n: int) -> None:
    """Fewer threads than cores keep torch's OpenMP workers from spinning against other processes' work: a smoke run
    shares the machine with the rest of the test suite."""
    if n < 1:
        raise SystemExit(f"--threads {n}: must be >= 1")
    os.environ["OMP_NUM_THREADS"] = str(n)
    os.environ["MKL_NUM_THREADS"] = str(n)
    import torch

    torch.set_num_threads(n)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    names = [n for n in FIGURES if n in args.only] if args.only else list(FIGURES)
    out: Path | None = args.out
    if out is None and not args.only and not args.smoke:
        out = RESULTS
    command = "python -m benchmarks" + (" --smoke" if args.smoke else "")
    command += "".join(f" --only {n}" for n in args.only or [])
    command += f" --threads {args.threads}" if args.threads is not None else ""
    threads = 1 if args.smoke and args.threads is None else args.threads
    if threads is not None:
        _set_threads(threads)
    harness.COLLECT = not args.smoke
    started, before = now(), loadavg()
    results: list[Result] = []
    for name in names:
        print(f"[benchmarks] {name} ...", file=sys.stderr, flush=True)
        start = time.perf_counter()
        results += _run_one(name, args.smoke)
        print(f"[benchmarks] {name} took {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    text = render(results, command=command, started=started, load_before=before, load_after=loadavg())
    print(text)
    if out is not None:
        write_atomic(out, text)
        print(f"[benchmarks] wrote {out}", file=sys.stderr)
    return 1 if any(r.headline.startswith("error:") for r in results) else 0


def exit_now(code: int) -> None:
    """Exit without the interpreter's teardown, which takes over a second once torch and transformers are loaded;
    everything is written by then (the table atomically), so only the standard streams need flushing."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
