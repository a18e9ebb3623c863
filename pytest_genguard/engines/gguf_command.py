"""`genguard check-gguf GGUF SNAPSHOT...`: its arguments, the snapshots it reads, what it prints and its exit code.
The judging is `engines.gguf_check.GGUFJudge`'s.

Exit codes: the one gate of `core.gate` (0 within, 1 outside, 2 bad input, 3 stale, 4 unproven). Kept apart from
``cli.py`` (which reads traces with the core alone): the judge loads torch, transformers and llama-cpp-python, inside
`run()` only; the arguments load neither.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import IO

from pytest_genguard.core.budget import KV_CACHE_TYPES, parse_budget
from pytest_genguard.core.documents import parse_document
from pytest_genguard.core.errors import EngineUnavailable, TraceFormatError
from pytest_genguard.core.gate import EXIT_USAGE, exit_for
from pytest_genguard.core.history import RecorderHistory
from pytest_genguard.core.trace import GenerationTrace
from pytest_genguard.engines.gguf_check import BadInput, GGUFJudge, gguf_argument

__all__ = ["add_arguments", "check", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The subcommand's arguments (`cli.build_parser` adds the subparser)."""
    parser.add_argument("gguf", type=Path, metavar="GGUF", help="the .gguf file llama.cpp runs")
    parser.add_argument("snapshots", type=Path, nargs="+", metavar="SNAPSHOT", help="a .genguard file or a folder")
    parser.add_argument(
        "--budget",
        default=None,
        metavar="PRESET|KEY=VALUE,...",
        help="judge by this fidelity budget (default: by the file type: F32 the float32 rule, or with another KV "
        "cache that cache's kv-* preset; BF16 bf16; Q8_0, Q6_K, Q4_K_M, Q4_1 their gguf-* presets)",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        default=None,
        metavar="GGUF",
        help="judge against this known-good GGUF of the same model (the file you shipped) instead of a budget: both "
        "measured in this run against the same reference, on the snapshots' paths and the long probe band by band; "
        "the candidate may exceed the baseline's KLD by what separates two correct conversions alone",
    )
    parser.add_argument(
        "--kv-cache",
        default="f16",
        choices=KV_CACHE_TYPES,
        help="llama.cpp's KV cache type (default: f16, llama.cpp's own; f32 holds the float32 rule on an F32 file; "
        "q8_0 and q4_0 run with flash attention, as llama.cpp requires)",
    )
    parser.add_argument(
        "--model",
        type=Path,
        default=None,
        metavar="DIR",
        help="the snapshot model's save_pretrained folder: its config and tokenizer judge the GGUF's metadata and "
        "tokenizer, and the model itself is the reference: every figure exact, the long probe read through both "
        "(default: transformers' reading of the GGUF, which checks the tokenizer only; figures bounded by the "
        "snapshot's top-k)",
    )
    parser.add_argument(
        "--no-long-probe",
        action="store_true",
        help="leave out the long probe (with --model: a built-in text of 2,048 tokens, or the model's context, read "
        "through the model and the GGUF, judged by the same budget, band by band)",
    )


def _traces(paths: list[Path]) -> list[tuple[str, GenerationTrace]]:
    out = []
    for path in paths:
        files = sorted(p for p in path.rglob("*.genguard") if p.is_file()) if path.is_dir() else [path]
        if not files:
            raise BadInput(f"{path}: no .genguard files found (snapshots are .genguard files under __snapshots__)")
        for file in files:
            try:
                document = parse_document(file.read_text(encoding="utf-8"), str(file))
            except (OSError, UnicodeDecodeError) as exc:
                raise BadInput(f"{file}: cannot read it ({exc}); pass a .genguard snapshot file") from None
            except TraceFormatError as exc:
                raise BadInput(str(exc)) from None
            if isinstance(document, RecorderHistory):
                raise BadInput(f"{file}: a recorder history; check-gguf judges trace snapshots")
            out.append((str(file), document))
    return out


def check(
    gguf: Path,
    snapshots: list[Path],
    *,
    budget: str | None = None,
    kv_cache: str = "f16",
    model_dir: Path | None = None,
    probe: bool = True,
    baseline: Path | None = None,
    out: IO[str] | None = None,
) -> int:
    """The command's work; returns its exit code (`core.gate`; bad input raises `BadInput`)."""
    stream = out if out is not None else sys.stdout
    if budget is not None and baseline is not None:
        raise BadInput("--budget and --baseline: pass one (a baseline sets the limits from its own figures)")
    limits = None
    if budget is not None:
        try:
            limits = parse_budget(budget)
        except ValueError as exc:
            raise BadInput(str(exc)) from None
    path = gguf_argument(gguf)
    traces = _traces(snapshots)
    try:
        judge = GGUFJudge.open(
            path, kv_cache=kv_cache, model_dir=model_dir, budget=limits, probe=probe, baseline=baseline
        )
    except EngineUnavailable as exc:
        raise BadInput(str(exc)) from None
    _, why = judge.judgement(limits)
    stream.write(f"judged by {why if budget is None else f'--budget {budget}'}\n")
    if model_dir is None:
        stream.write(
            "metadata: not checked, figures bounded by the snapshots' top-k, no long probe (without --model the "
            "config is the GGUF's own and the reference model is not in process)\n"
        )
    elif not probe:
        stream.write("long probe: left out (--no-long-probe)\n")
    mismatches = judge.mismatches([t for _, t in traces])
    for mismatch in mismatches:
        stream.write(f"stale: {mismatch}\n")
    statuses = ["stale"] if mismatches else []
    outside = "OUTSIDE THE BUDGET" if baseline is None else "OUTSIDE THE BASELINE"
    for name, reference in traces:
        judged = judge.judge(reference, budget=limits)
        where = f"{name} -> {path.name} ({judge.file_type}, KV cache {kv_cache})"
        statuses.append(judged.status)
        if judged.report is None:
            stream.write(f"{where}: {'holds' if judged.holds else 'REGRESSION'} (float32 rule)\n{judged}\n")
        else:
            said = {"within": "within", "unproven": "UNPROVEN (within on lower bounds only, which proves nothing)"}
            stream.write(f"{where}: {said.get(judged.status, outside)}\n{judged}\n")
    code = exit_for(statuses)
    stream.write(f"{len(traces)} snapshots: exit {code}\n")
    return code


def run(args: argparse.Namespace) -> int:
    """`genguard check-gguf` from parsed arguments: its exit code, bad input reported on stderr (2)."""
    try:
        return check(
            args.gguf,
            args.snapshots,
            budget=args.budget,
            kv_cache=args.kv_cache,
            model_dir=args.model,
            probe=not args.no_long_probe,
            baseline=args.baseline,
        )
    except BadInput as exc:
        sys.stderr.write(f"genguard check-gguf: {exc}\n")
        return EXIT_USAGE
