"""`genguard check-gguf GGUF SNAPSHOT...`: judge a GGUF file (what llama.cpp, Ollama and LM Studio run) against the
snapshots of the model it was converted from.

Each snapshot's paths are teacher forced through llama.cpp (`pytest_genguard.engines.llama_cpp`), then judged by
``--budget``, or else by the GGUF's file type (`judgement()`): an F32 file by the float32 rule (f32 KV cache) or the
fp16 preset (llama.cpp's f16 KV cache), a quantized file by its type's preset (``gguf-q4_k_m`` ...). Under a budget
every step of every path is compared from llama.cpp's full distribution (a flip counts; it never ends a path): with
``--model`` (the snapshot's own model) exactly over the full vocabulary, with the long probe (a built-in text of
2,048 tokens, past any sliding window) read through both; without it, on the snapshot's recorded top-k (lower bounds,
proven only against a calibrated snapshot). Exit codes: the one gate of `core.gate` (0 within, 1 outside, 2 bad
input, 3 stale, 4 unproven). Before that, the GGUF's tokenizer, special tokens and metadata are checked
(`gguf_conformance`): a mismatch is stale, named, since no logit of a given id sequence shows it.

Kept apart from ``cli.py`` (which reads traces with the core alone): this command loads torch, transformers and
llama-cpp-python, inside `run()` only.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from pytest_genguard.core.budget import GGUF_TYPE_PRESETS, PRESETS, Budget, FidelityReport, parse_budget
from pytest_genguard.core.compare import compare
from pytest_genguard.core.comparison import Comparison
from pytest_genguard.core.documents import parse_document
from pytest_genguard.core.errors import EngineUnavailable, TraceFormatError
from pytest_genguard.core.gate import (
    EXIT_OUTSIDE,
    EXIT_STALE,
    EXIT_UNPROVEN,
    EXIT_USAGE,
    EXIT_WITHIN,
    UNPROVEN,
    exit_for,
    gate_line,
)
from pytest_genguard.core.history import RecorderHistory
from pytest_genguard.core.long_context import coverage
from pytest_genguard.core.tolerances import Overrides
from pytest_genguard.core.trace import GenerationTrace
from pytest_genguard.core.verdict import Verdict
from pytest_genguard.engines.gguf_transformers import gguf_config_and_tokenizer

if TYPE_CHECKING:
    from pytest_genguard.engines.gguf_conformance import Mismatch

__all__ = [
    "EXIT_OK",
    "EXIT_REGRESSION",
    "EXIT_STALE",
    "EXIT_UNPROVEN",
    "EXIT_USAGE",
    "BadInput",
    "GGUFJudge",
    "GGUFJudged",
    "add_arguments",
    "judgement",
    "run",
]

EXIT_OK = EXIT_WITHIN
EXIT_REGRESSION = EXIT_OUTSIDE


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
        "tokenizer, and the model itself is the reference: every figure exact, the long probe read through both "
        "(default: transformers' reading of the GGUF, which checks the tokenizer only; figures bounded by the "
        "snapshot's top-k)",
    )
    parser.add_argument(
        "--no-long-probe",
        action="store_true",
        help="leave out the long probe (with --model: a built-in text of 2,048 tokens, or the model's context, read "
        "through the model and the GGUF, judged by the same budget)",
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


def _hf_side(gguf: Path, model_dir: Path | None) -> tuple[Any, Any, Any]:
    """The Hugging Face side (model, tokenizer, config): from `model_dir`; else the GGUF's own config and tokenizer as
    transformers reads them (`gguf_transformers`: read once per state of the file), and no model
    (`GGUFJudge.hf_model` dequantizes the GGUF when a path needs one)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if model_dir is not None:
        if not (model_dir / "config.json").is_file():
            raise BadInput(f"--model {model_dir}: holds no config.json; pass the folder save_pretrained wrote")
        model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
        return model, AutoTokenizer.from_pretrained(str(model_dir)), model.config
    config, tokenizer = gguf_config_and_tokenizer(gguf)
    return None, tokenizer, config


def _dequantized(gguf: Path) -> Any:
    """The GGUF's weights as transformers dequantizes them, in float32 (every tensor: a 4-bit file's model takes eight
    times its size in memory)."""
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(gguf.parent), dtype=torch.float32, gguf_file=gguf.name).eval()


@dataclass(frozen=True)
class GGUFJudged:
    """One snapshot judged on the GGUF: how it was judged (the float32 rule, or a budget, and why), and the rule's
    comparison (with llama.cpp's trace along the snapshot's paths) or the budget's report (every step compared)."""

    how: str
    candidate: GenerationTrace | None = None
    comparison: Comparison | None = None
    report: FidelityReport | None = None
    coverage_line: str = ""
    probe: FidelityReport | None = None
    """The long probe of a file judged by the float32 rule, by `fp16` (`GGUFJudge._rule_probe`; a budget's probe is
    in `report`)."""

    @property
    def status(self) -> str:
        """`core.gate.STATUS_EXIT`'s key: within, outside, unproven (a budget) or holds, regression (the rule)."""
        if self.report is not None:
            return self.report.status
        held = self.comparison is not None and self.comparison.ok and (self.probe is None or self.probe.holds)
        return "holds" if held else "regression"

    @property
    def holds(self) -> bool:
        """Proven within (a bound that proves nothing does not hold: `core.gate`)."""
        return self.status in ("within", "holds")

    @property
    def verdict(self) -> Verdict:
        if self.report is not None:
            return Verdict.WITHIN_TOLERANCE if self.report.holds else Verdict.REGRESSION
        assert self.comparison is not None
        if self.probe is not None and not self.probe.holds:
            return Verdict.REGRESSION
        return self.comparison.verdict

    def said(self) -> str:
        """The verdict in words (unproven named as such)."""
        return UNPROVEN if self.status == "unproven" else str(self.verdict)

    def __str__(self) -> str:
        if self.report is not None:
            return f"{self.report}\n  {gate_line(self.report, in_process=WITH_MODEL)}"
        lines = [str(self.comparison)] + ([f"  {self.coverage_line}"] if self.coverage_line else [])
        if self.probe is not None:
            m = self.probe.metrics
            said = "within" if self.probe.holds else "OUTSIDE"
            lines.append(
                f"  long probe {said} fp16 (the float32 rule's allowance is a short path's rounding: over 2,048 "
                f"positions llama.cpp's and torch's float32 sums drift past it): KLD mean {m['kld_mean']:.3g}, max "
                f"{m['kld_max']:.3g}; {self.probe.budget}"
            )
        return "\n".join(lines)


WITH_MODEL = "pass the snapshot's model folder (--model DIR, --genguard-gguf-model DIR): exact over the full vocabulary"
"""How a GGUF's bound is proven with the reference model at hand (`core.gate.unproven_hint`)."""


@dataclass
class GGUFJudge:
    """A GGUF opened for judging snapshots: its llama.cpp engine (with its KV cache type), its file type, and the
    Hugging Face side (the model, its config and tokenizer: from `model_dir`; else the GGUF's own config and tokenizer
    as transformers reads them, its weights dequantized only for the float32 rule: `hf_model`). With `model_dir` the
    model is the reference: a budget's figures are exact and the long probe is read once (`probe`). `genguard
    check-gguf` and ``pytest --genguard-gguf`` open one and judge every snapshot."""

    path: Path
    kv_cache: str
    file_type: str
    model: Any
    """The Hugging Face model (from `model_dir`: the reference); without `model_dir`, None until `hf_model()`."""
    tokenizer: Any
    llama: Any
    model_dir: Path | None = None
    probe: bool = True
    gguf_config: Any = None
    """The GGUF's own config as transformers reads it: `config` while no model is loaded."""
    _logits: Any = None
    _probe: Any = None
    _weights: str | None = None

    @classmethod
    def open(
        cls,
        gguf: Path,
        *,
        kv_cache: str = "f16",
        model_dir: Path | None = None,
        budget: Budget | None = None,
        probe: bool = True,
    ) -> GGUFJudge:
        """`BadInput` for a file that is not a GGUF or a model folder without a config; `EngineUnavailable` without
        the llama_cpp extra; with `budget` None, `BadInput` for a file type without a preset (`judgement()`). Each
        is raised before the Hugging Face side is loaded."""
        path = _gguf(gguf)
        from pytest_genguard.engines import engine

        llama = engine("llama_cpp", kv_cache=kv_cache)
        from pytest_genguard.engines.llama_cpp import file_type

        kind = file_type(path)
        if budget is None:
            try:
                judgement(kind, kv_cache)
            except ValueError as exc:
                raise BadInput(f"GGUF {path}: {exc}") from None
        model, tokenizer, config = _hf_side(path, model_dir)
        return cls(path, kv_cache, kind, model, tokenizer, llama, model_dir, probe, config)

    @property
    def config(self) -> Any:
        """The model's config: the reference model's, else the GGUF's own."""
        return self.model.config if self.model is not None else self.gguf_config

    def hf_model(self) -> Any:
        """The Hugging Face model: the reference model, else the GGUF dequantized (once). Only the float32 rule needs
        one without `model_dir` (its trace takes the generation config and fingerprint from a model); a budget judges
        from the config, so a quantized file's weights are never dequantized for it."""
        if self.model is None:
            self.model = _dequantized(self.path)
        return self.model

    def mismatches(self, traces: Sequence[GenerationTrace]) -> list[Mismatch]:
        """What differs beyond the logits (stale): the tokenizer and the chat template on the snapshots' prompts, and
        the metadata against the config when the model's folder was given."""
        from pytest_genguard.engines import gguf_conformance

        found = gguf_conformance.tokenizer_mismatches(self.path, self.tokenizer, traces)
        found += gguf_conformance.template_mismatches(self.path, self.tokenizer, traces)
        if self.model_dir is not None:
            found = gguf_conformance.metadata_mismatches(self.path, self.config) + found
        return found

    def judgement(self, budget: Budget | None = None) -> tuple[Budget | None, str]:
        """(None for the float32 rule, or the budget; why): `budget` when given, else by the file type
        (`judgement()`; ValueError for a type without a preset)."""
        if budget is not None:
            return budget, f"budget {budget.name}"
        return judgement(self.file_type, self.kv_cache)

    def logits(self) -> Any:
        """llama.cpp's context on the file, loaded once."""
        if self._logits is None:
            self._logits = self.llama.backend.load(self.path)
        return self._logits

    def is_reference(self, reference: GenerationTrace) -> bool:
        """Whether the model in process is `reference`'s own (the folder given and its weights the snapshot's)."""
        if self.model_dir is None:
            return False
        if self._weights is None:
            from pytest_genguard.hf.weights_hash import weights_hash

            self._weights = weights_hash(self.model)
        return reference.model is not None and reference.model.weights_hash == self._weights

    def _probe_judge(self) -> Any:
        if self._probe is None:
            from pytest_genguard.engines.base import engine_chunks
            from pytest_genguard.hf.long_probe import probe_judge

            self._probe = probe_judge(self.model, self.tokenizer, engine_chunks(self.logits()))
        return self._probe

    def judge(
        self, reference: GenerationTrace, *, budget: Budget | None = None, overrides: Overrides | None = None
    ) -> GGUFJudged:
        """`reference`'s paths teacher forced through llama.cpp and judged: by `budget`, else by the file type; the
        float32 rule under `overrides` (a test's tolerances). Under a budget every step is compared, exactly when the
        model in process is the snapshot's, with the long probe (read once per judge)."""
        limits, why = self.judgement(budget)
        if limits is None:
            model = self.hf_model()
            candidate = self.llama.record_model(model, self.tokenizer, reference=reference, converted=self.path)
            args = (overrides or Overrides()).args()
            cmp = compare(reference, candidate, check_fingerprints=False, **args)
            probe = self._rule_probe() if self.probe and self.model_dir is not None else None
            return GGUFJudged(why, candidate, comparison=cmp, coverage_line=self._coverage(reference), probe=probe)
        from pytest_genguard.engines.base import forced_engine_logits
        from pytest_genguard.hf.fidelity import judged_logits

        exact = self.is_reference(reference)
        steps = max((len(p.steps) for p in reference.prompts), default=0)
        report = judged_logits(
            forced_engine_logits(self.logits(), reference, steps),
            self.tokenizer,
            reference,
            budget=limits,
            reference_model=self.model if exact else None,
            probe=self._probe_judge() if self.probe and self.model_dir is not None else None,
            config=self.config,
            where="check-gguf",
        )
        if self.model_dir is not None and not exact:
            why += "; bounded by the snapshot's top-k: the --model folder's weights are not the snapshot's model's"
        return GGUFJudged(why, report=report)

    def _rule_probe(self) -> FidelityReport:
        """The long probe of a file judged by the float32 rule, judged by `fp16` on the probe instead: the rule's
        allowance is a short path's rounding, and llama.cpp's and torch's float32 sums drift past it over 2,048
        positions with no bug (3.4e-5 in a logprob at position 401 on SmolLM2's F32 file, f32 KV cache)."""
        report: FidelityReport = self._probe_judge()(PRESETS["fp16"])[0]
        return report

    def _coverage(self, reference: GenerationTrace) -> str:
        from pytest_genguard.hf.long_probe import window_and_context

        window, context = window_and_context(self.config)
        return coverage(reference, sliding_window=window, context=context).line()


def check(
    gguf: Path,
    snapshots: list[Path],
    *,
    budget: str | None = None,
    kv_cache: str = "f16",
    model_dir: Path | None = None,
    probe: bool = True,
    out: IO[str] | None = None,
) -> int:
    """The command's work; returns its exit code (`core.gate`; bad input raises `BadInput`)."""
    stream = out if out is not None else sys.stdout
    limits = None
    if budget is not None:
        try:
            limits = parse_budget(budget)
        except ValueError as exc:
            raise BadInput(str(exc)) from None
    path = _gguf(gguf)
    traces = _traces(snapshots)
    try:
        judge = GGUFJudge.open(path, kv_cache=kv_cache, model_dir=model_dir, budget=limits, probe=probe)
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
    for name, reference in traces:
        judged = judge.judge(reference, budget=limits)
        where = f"{name} -> {path.name} ({judge.file_type}, KV cache {kv_cache})"
        statuses.append(judged.status)
        if judged.report is None:
            stream.write(f"{where}: {'holds' if judged.holds else 'REGRESSION'} (float32 rule)\n{judged}\n")
        else:
            said = {"within": "within", "unproven": "UNPROVEN (within on lower bounds only, which proves nothing)"}
            stream.write(f"{where}: {said.get(judged.status, 'OUTSIDE THE BUDGET')}\n{judged}\n")
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
        )
    except BadInput as exc:
        sys.stderr.write(f"genguard check-gguf: {exc}\n")
        return EXIT_USAGE
