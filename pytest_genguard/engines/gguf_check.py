"""`genguard check-gguf GGUF SNAPSHOT...`: judge a GGUF file (what llama.cpp, Ollama and LM Studio run) against the
snapshots of the model it was converted from.

Each snapshot's paths are teacher forced through llama.cpp (`pytest_genguard.engines.llama_cpp`), then judged by
``--budget``, or else by the GGUF's file type (`judgement()`): an F32 file by the float32 rule (f32 KV cache) or the
fp16 preset (llama.cpp's f16 KV cache), a quantized file by its type's preset (``gguf-q4_k_m`` ...). Before that,
the GGUF's tokenizer, special tokens and metadata are checked (`gguf_conformance`): a mismatch is stale, named,
since no logit of a given id sequence shows it.

Kept apart from ``cli.py`` (which reads traces with the core alone): this command loads torch, transformers and
llama-cpp-python, inside `run()` only.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import IO, Any

from pytest_genguard.core.budget import GGUF_TYPE_PRESETS, PRESETS, Budget, parse_budget, traces_report
from pytest_genguard.core.compare import compare
from pytest_genguard.core.documents import parse_document
from pytest_genguard.core.errors import EngineUnavailable, TraceFormatError
from pytest_genguard.core.history import RecorderHistory
from pytest_genguard.core.trace import GenerationTrace

__all__ = ["EXIT_OK", "EXIT_REGRESSION", "EXIT_STALE", "EXIT_USAGE", "add_arguments", "judgement", "run"]

EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_USAGE = 2
EXIT_STALE = 3
HELP = "judge a GGUF file through llama.cpp against snapshots (exit 0 hold, 1 regression, 2 bad input, 3 stale)"


class BadInput(Exception):
    """Input the command cannot judge; its message names the file or argument and the fix."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The subcommand's arguments (`cli.build_parser` adds the subparser)."""
    parser.add_argument("gguf", type=Path, metavar="GGUF", help="the .gguf file llama.cpp runs")
    parser.add_argument("snapshots", type=Path, nargs="+", metavar="SNAPSHOT", help="a .genguard file or a folder")
    parser.add_argument(
        "--budget",
        default=None,
        metavar="PRESET|KEY=VALUE,...",
        help="judge by this fidelity budget (default: by the file type: F32 the float32 rule, or fp16 with an f16 KV "
        "cache; BF16 bf16; Q8_0, Q6_K, Q4_K_M, Q4_1 their gguf-* presets)",
    )
    parser.add_argument(
        "--kv-cache",
        default="f16",
        choices=("f16", "f32"),
        help="llama.cpp's KV cache type (default: f16, llama.cpp's own; f32 holds the float32 rule on an F32 file)",
    )
    parser.add_argument(
        "--model",
        type=Path,
        default=None,
        metavar="DIR",
        help="the snapshot model's save_pretrained folder: its config and tokenizer judge the GGUF's metadata and "
        "tokenizer (default: transformers' reading of the GGUF, which checks the tokenizer only)",
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


def _gguf(path: Path) -> Path:
    """`path`, checked to be a GGUF file (by its magic bytes)."""
    if not path.is_file():
        raise BadInput(f"GGUF {path}: no such file; pass the .gguf file llama.cpp runs")
    with path.open("rb") as f:
        if f.read(4) != b"GGUF":
            raise BadInput(f"GGUF {path}: not a GGUF file (it does not start with b'GGUF'); pass the .gguf file")
    return path


def judgement(file_type: str, kv_cache: str) -> tuple[Budget | None, str]:
    """How a GGUF of llama.cpp file type `file_type` run with a `kv_cache` KV cache is judged when no ``--budget`` is
    given: (None for the float32 rule, or its preset; why). ValueError for a file type without a preset."""
    if file_type == "F32" and kv_cache == "f32":
        return None, "float32 rule: an F32 file with an f32 KV cache computes in float32"
    if file_type == "F32":
        return PRESETS["fp16"], (
            "preset fp16: an F32 file, but llama.cpp's f16 KV cache rounds every key and value to float16, a float16 "
            "precision change the float32 rule would call a regression; --kv-cache f32 for the float32 rule"
        )
    name = GGUF_TYPE_PRESETS.get(file_type)
    if name is None:
        known = ", ".join(f"{t} {p}" for t, p in GGUF_TYPE_PRESETS.items())
        raise ValueError(
            f"file type {file_type} has no preset (F32 is judged by the float32 rule; {known}); pass --budget "
            f"(a preset: {', '.join(PRESETS)}, or limits KEY=VALUE,...)"
        )
    return PRESETS[name], f"preset {name}: the preset of file type {file_type}"


def _hf_side(gguf: Path, model_dir: Path | None) -> tuple[Any, Any]:
    """The Hugging Face model and tokenizer: from `model_dir`, else as transformers dequantizes the GGUF."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if model_dir is not None:
        if not (model_dir / "config.json").is_file():
            raise BadInput(f"--model {model_dir}: holds no config.json; pass the folder save_pretrained wrote")
        model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    else:
        kwargs = {"gguf_file": gguf.name}
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), dtype=torch.float32, **kwargs)
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), **kwargs)
    model.eval()
    return model, tokenizer


def check(
    gguf: Path,
    snapshots: list[Path],
    *,
    budget: str | None = None,
    kv_cache: str = "f16",
    model_dir: Path | None = None,
    out: IO[str] | None = None,
) -> int:
    """The command's work; returns its exit code (bad input raises `BadInput`)."""
    stream = out if out is not None else sys.stdout
    limits = None
    if budget is not None:
        try:
            limits = parse_budget(budget)
        except ValueError as exc:
            raise BadInput(str(exc)) from None
    path = _gguf(gguf)
    traces = _traces(snapshots)
    from pytest_genguard.engines import engine

    try:
        llama = engine("llama_cpp", kv_cache=kv_cache)
        from pytest_genguard.engines import gguf_conformance
    except EngineUnavailable as exc:
        raise BadInput(str(exc)) from None
    from pytest_genguard.engines.llama_cpp import file_type

    kind = file_type(path)
    if limits is None:
        try:
            limits, why = judgement(kind, kv_cache)
        except ValueError as exc:
            raise BadInput(f"GGUF {path}: {exc}") from None
    else:
        why = f"--budget {budget}"
    stream.write(f"judged by {why}\n")
    model, tokenizer = _hf_side(path, model_dir)
    snapshots_traces = [t for _, t in traces]
    mismatches = gguf_conformance.tokenizer_mismatches(path, tokenizer, snapshots_traces)
    mismatches += gguf_conformance.template_mismatches(path, tokenizer, snapshots_traces)
    if model_dir is not None:
        mismatches = gguf_conformance.metadata_mismatches(path, model.config) + mismatches
    else:
        stream.write("metadata: not checked (without --model the config is the GGUF's own)\n")
    for mismatch in mismatches:
        stream.write(f"stale: {mismatch}\n")
    regressed = False
    for name, reference in traces:
        candidate = llama.record_model(model, tokenizer, reference=reference, converted=path)
        where = f"{name} -> {path.name} ({kind}, KV cache {kv_cache})"
        if limits is None:
            comparison = compare(reference, candidate, check_fingerprints=False)
            regressed |= not comparison.ok
            stream.write(f"{where}: {'holds' if comparison.ok else 'REGRESSION'} (float32 rule)\n{comparison}\n")
        else:
            report = traces_report(reference, candidate, limits)
            regressed |= not report.holds
            stream.write(f"{where}: {'holds' if report.holds else 'OUTSIDE THE BUDGET'}\n{report}\n")
    if regressed:
        return EXIT_REGRESSION
    return EXIT_STALE if mismatches else EXIT_OK


def run(args: argparse.Namespace) -> int:
    """`genguard check-gguf` from parsed arguments: its exit code, bad input reported on stderr (2)."""
    try:
        return check(args.gguf, args.snapshots, budget=args.budget, kv_cache=args.kv_cache, model_dir=args.model)
    except BadInput as exc:
        sys.stderr.write(f"genguard check-gguf: {exc}\n")
        return EXIT_USAGE
