"""A GGUF file (what llama.cpp, Ollama and LM Studio run) judged against the snapshots of the model it was converted
from: `GGUFJudge`, which ``genguard check-gguf`` (`engines.gguf_command`) and ``pytest --genguard-gguf``
(`plugin.gguf_check`) open once and ask about every snapshot.

Each snapshot's paths are teacher forced through llama.cpp (`pytest_genguard.engines.llama_cpp`), then judged by a
budget, or else by the GGUF's file type (`judgement()`): an F32 file by the float32 rule (f32 KV cache) or by its
cache's preset (``kv-f16`` for llama.cpp's default: the cache is the only lossy part), a quantized file by its type's
preset (``gguf-q4_k_m`` ...); or, given a baseline file (the one you shipped), against that file's own figures
measured in the same run (`core.baseline`). Under a budget every step of every path is compared from llama.cpp's
full distribution (a flip counts; it never ends a path): with the snapshot's own model in process exactly over the
full vocabulary, with the long probe (a built-in text of 2,048 tokens, past any sliding window, judged band by band)
read through both; without it, on the snapshot's recorded top-k (lower bounds, proven only against a calibrated
snapshot). The GGUF's tokenizer, special tokens and metadata are checked too (`gguf_conformance`): a mismatch is
stale, named, since no logit of a given id sequence shows it. Importing this module loads neither torch nor
llama-cpp-python: `GGUFJudge.open` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_genguard.core.budget import GGUF_TYPE_PRESETS, KV_CACHE_PRESETS, PRESETS, Budget, FidelityReport
from pytest_genguard.core.compare import compare
from pytest_genguard.core.comparison import Comparison
from pytest_genguard.core.gate import UNPROVEN, gate_line
from pytest_genguard.core.long_context import ProbeInfo, coverage
from pytest_genguard.core.tolerances import Overrides
from pytest_genguard.core.trace import GenerationTrace
from pytest_genguard.core.verdict import Verdict
from pytest_genguard.engines.gguf_transformers import gguf_config_and_tokenizer
from pytest_genguard.engines.kept_files import KeptPerState

if TYPE_CHECKING:
    from pytest_genguard.engines.gguf_conformance import Mismatch

__all__ = ["WITH_MODEL", "BadInput", "GGUFJudge", "GGUFJudged", "gguf_argument", "judgement"]


class BadInput(Exception):
    """Input the command cannot judge; its message names the file or argument and the fix."""


def gguf_argument(path: Path, what: str = "GGUF") -> Path:
    """`path`, checked to be a GGUF file (by its magic bytes); `what` names the argument in the error."""
    if not path.is_file():
        raise BadInput(f"{what} {path}: no such file; pass the .gguf file llama.cpp runs")
    with path.open("rb") as f:
        if f.read(4) != b"GGUF":
            raise BadInput(f"{what} {path}: not a GGUF file (it does not start with b'GGUF'); pass the .gguf file")
    return path


def judgement(file_type: str, kv_cache: str, *, tabled: bool = False) -> tuple[Budget | None, str]:
    """How a GGUF of llama.cpp file type `file_type` run with a `kv_cache` KV cache is judged when no ``--budget`` is
    given: (None for the float32 rule, or its preset; why). ValueError for a file type without a preset. An F32
    file's only lossy parts are its cache and, for a model with a tanh GELU (`tabled`:
    `hf.kv_cache_copies.tabled_activation`), ggml's float16 GELU table: its preset scales the reference's own copy
    lossy in just those parts."""
    if file_type == "F32" and kv_cache == "f32" and tabled:
        return PRESETS["kv-f32"], (
            "preset kv-f32: an F32 file with an f32 KV cache, but llama.cpp computes this model's tanh GELU through "
            "a float16 table, judged against the reference model's own copy rounded there"
        )
    if file_type == "F32" and kv_cache == "f32":
        return None, "float32 rule: an F32 file with an f32 KV cache computes in float32"
    if file_type == "F32":
        cache = KV_CACHE_PRESETS[kv_cache]
        return PRESETS[cache], (
            f"preset {cache}: an F32 file whose {kv_cache} KV cache alone is lossy (llama.cpp rounds every key and "
            "value to it, and the queries and attention weights its products take), judged against the reference "
            f"model's own attention over a {kv_cache} cache; --kv-cache f32 for the float32 rule"
        )
    name = GGUF_TYPE_PRESETS.get(file_type)
    if name is None:
        known = ", ".join(f"{t} {p}" for t, p in GGUF_TYPE_PRESETS.items())
        raise ValueError(
            f"file type {file_type} has no preset (F32 is judged by the float32 rule or its KV cache's preset; "
            f"{known}); pass --budget (a preset: {', '.join(PRESETS)}, or limits KEY=VALUE,...) or --baseline FILE"
        )
    if kv_cache not in ("f16", "f32"):
        raise ValueError(
            f"file type {file_type} with a {kv_cache} KV cache has no preset (the type presets were measured with "
            f"llama.cpp's f16 cache, and a {kv_cache} cache adds a loss of its own); pass --budget or --baseline FILE"
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
    probe_info: ProbeInfo | None = None

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
            lines.append(
                "  the long probe is judged by fp16 (the float32 rule's allowance is a short path's rounding: over "
                "2,048 positions llama.cpp's and torch's float32 sums drift past it):"
            )
            lines += FidelityReport((), probe=self.probe, probe_info=self.probe_info).probe_lines()
        return "\n".join(lines)


_KEEP_PROBES = 8
_PROBES: dict[tuple[str, str], KeptPerState[Any]] = {}
"""The long probe's steps of each GGUF read in this process, per reference model state and KV cache, kept per state of
the file (`kept_files`): a session that judges a file against several baselines, or a baseline against several
candidates, reads each file's probe once (2,047 positions: about 1 MB each)."""

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
    baseline: Path | None = None
    """A known-good GGUF of the same model (the file you shipped): every snapshot is judged against it instead of a
    budget, both files measured in the same run against the same reference (`core.baseline`)."""
    _logits: Any = None
    _probe: Any = None
    _weights: str | None = None
    _baseline_logits: Any = None
    _baseline_probe: Any = None

    @classmethod
    def open(
        cls,
        gguf: Path,
        *,
        kv_cache: str = "f16",
        model_dir: Path | None = None,
        budget: Budget | None = None,
        probe: bool = True,
        baseline: Path | None = None,
    ) -> GGUFJudge:
        """`BadInput` for a file that is not a GGUF (or a `baseline` that is not) or a model folder without a config;
        `EngineUnavailable` without the llama_cpp extra; with neither `budget` nor `baseline`, `BadInput` for a file
        type without a preset (`judgement()`). Each is raised before the Hugging Face side is loaded."""
        path = gguf_argument(gguf)
        known = None if baseline is None else gguf_argument(baseline, "--baseline")
        from pytest_genguard.engines import engine

        llama = engine("llama_cpp", kv_cache=kv_cache)
        from pytest_genguard.engines.llama_cpp import file_type

        kind = file_type(path)
        if budget is None and known is None:
            try:
                judgement(kind, kv_cache)
            except ValueError as exc:
                raise BadInput(f"GGUF {path}: {exc}") from None
        model, tokenizer, config = _hf_side(path, model_dir)
        return cls(path, kv_cache, kind, model, tokenizer, llama, model_dir, probe, config, known)

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
        (`judgement()`; ValueError for a type without a preset). A judge with a `baseline` judges by it
        (`judge()`), whatever the budget."""
        if self.baseline is not None:
            return None, (
                f"the baseline {self.baseline.name}: its KLD measured in this run against the same reference, within "
                "an allowance of what separates two correct conversions"
            )
        if budget is not None:
            return budget, f"budget {budget.name}"
        from pytest_genguard.hf.kv_cache_copies import tabled_activation

        return judgement(self.file_type, self.kv_cache, tabled=tabled_activation(self.config))

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

    def _probe_of(self, path: Path, logits: Any) -> Any:
        """The long probe of the GGUF at `path` (its llama.cpp context `logits`): read once per state of the file,
        KV cache and reference model in this process (`_PROBES`), whichever judge asks; and stored in genguard's
        cache by the file's bytes (`hf.probe_store`), so a later run, or the other xdist worker, reads it instead."""
        from pytest_genguard.engines.base import engine_chunks
        from pytest_genguard.hf.long_probe import probe_ids, probe_judge
        from pytest_genguard.hf.probe_store import stored_steps
        from pytest_genguard.hf.weights_hash import weights_hash

        kept = _PROBES.setdefault((weights_hash(self.model), self.kv_cache), KeptPerState(_KEEP_PROBES))
        ids = probe_ids(self.tokenizer, self.model.config)

        def keep(read: Any) -> Any:
            return kept.get(path, lambda: stored_steps(self.model, ids, self._identity(path), read))

        return probe_judge(self.model, self.tokenizer, engine_chunks(logits), keep)

    def _identity(self, path: Path) -> dict[str, Any]:
        """What the logits of the GGUF at `path` depend on besides the reference (`hf.probe_store`): its bytes, the
        KV cache, llama.cpp's build and genguard's code that runs it."""
        from pytest_genguard.core.files import file_sha256
        from pytest_genguard.engines.llama_cpp import build_identity
        from pytest_genguard.hf.probe_store import code_hash

        return {
            "gguf_sha256": file_sha256(path),
            "kv_cache": self.kv_cache,
            "engine": build_identity(),
            "engine_code": code_hash(("pytest_genguard.engines.llama_cpp", "pytest_genguard.engines.base")),
        }

    def _probe_judge(self) -> Any:
        if self._probe is None:
            self._probe = self._probe_of(self.path, self.logits())
        return self._probe

    def _baseline(self, reference: GenerationTrace, steps: int, probe: bool) -> Any:
        """The baseline file as `hf.fidelity.judged_logits` takes it: its llama.cpp context (loaded once, with the
        same KV cache) forced along `reference`, and its long probe (read once) when the candidate's is read."""
        from pytest_genguard.engines.base import forced_engine_logits
        from pytest_genguard.hf.fidelity import Baseline

        assert self.baseline is not None
        if self._baseline_logits is None:
            # The file against itself (a baseline's own check) reads one context.
            same = self.baseline.resolve() == self.path.resolve()
            self._baseline_logits = self.logits() if same else self.llama.backend.load(self.baseline)
        if probe and self._baseline_probe is None:
            self._baseline_probe = self._probe_of(self.baseline, self._baseline_logits)
        logits = forced_engine_logits(self._baseline_logits, reference, steps)
        return Baseline(logits, self._baseline_probe if probe else None, self.baseline.name)

    def judge(
        self, reference: GenerationTrace, *, budget: Budget | None = None, overrides: Overrides | None = None
    ) -> GGUFJudged:
        """`reference`'s paths teacher forced through llama.cpp and judged: by `budget`, else by the file type; the
        float32 rule under `overrides` (a test's tolerances). Under a budget every step is compared, exactly when the
        model in process is the snapshot's, with the long probe (read once per judge). With a `baseline` the
        snapshot is judged against it instead (`core.baseline`)."""
        limits, why = self.judgement(budget)
        if limits is None and self.baseline is None:
            model = self.hf_model()
            candidate = self.llama.record_model(model, self.tokenizer, reference=reference, converted=self.path)
            args = (overrides or Overrides()).args()
            cmp = compare(reference, candidate, check_fingerprints=False, **args)
            probe, info = self._rule_probe() if self.probe and self.model_dir is not None else (None, None)
            line = self._coverage(reference)
            return GGUFJudged(why, candidate, comparison=cmp, coverage_line=line, probe=probe, probe_info=info)
        from pytest_genguard.engines.base import forced_engine_logits
        from pytest_genguard.hf.fidelity import judged_logits

        exact = self.is_reference(reference)
        steps = max((len(p.steps) for p in reference.prompts), default=0)
        read = self.probe and self.model_dir is not None
        report = judged_logits(
            forced_engine_logits(self.logits(), reference, steps),
            self.tokenizer,
            reference,
            budget=limits,
            reference_model=self.model if exact else None,
            probe=self._probe_judge() if read else None,
            config=self.config,
            where="check-gguf",
            baseline=None if self.baseline is None else self._baseline(reference, steps, read),
        )
        if self.model_dir is not None and not exact:
            why += "; bounded by the snapshot's top-k: the --model folder's weights are not the snapshot's model's"
        return GGUFJudged(why, report=report)

    def _rule_probe(self) -> tuple[FidelityReport, ProbeInfo]:
        """The long probe of a file judged by the float32 rule, judged by `fp16` on the probe instead: the rule's
        allowance is a short path's rounding, and llama.cpp's and torch's float32 sums drift past it over 2,048
        positions with no bug (3.4e-5 in a logprob at position 401 on SmolLM2's F32 file, f32 KV cache)."""
        judged: tuple[FidelityReport, ProbeInfo] = self._probe_judge()(PRESETS["fp16"])
        return judged

    def _coverage(self, reference: GenerationTrace) -> str:
        from pytest_genguard.hf.long_probe import window_and_context

        window, context = window_and_context(self.config)
        return coverage(reference, sliding_window=window, context=context).line()
