"""What every engine shares: its conversion cache, the teacher-forced pass through it, the trace it yields.

An engine module (`ct2`, `ort`, `llama_cpp`) gives a `Backend`: how to convert a `save_pretrained` folder, how to
load the result, and a function that returns the raw logits of whole token sequences. The rest is the same for every
engine and reuses the torch side: the model fingerprint and generation config come from the saved Hugging Face model,
the trace is built by `hf.teacher` (processors re-applied along the path, top-k, greedy preferences) from the
engine's logits instead of the model's, and the environment names the engine, so a failure reads ``recorded on
transformers, now ctranslate2``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pytest_genguard.core.budget import Budget, FidelityReport
from pytest_genguard.core.errors import EngineUnavailable
from pytest_genguard.core.jsontext import JSONScalar
from pytest_genguard.core.trace import GenerationTrace
from pytest_genguard.hf.cache import cache_key, default_cache_dir, fetch
from pytest_genguard.hf.fidelity import judged_logits
from pytest_genguard.hf.fingerprint import model_fingerprint
from pytest_genguard.hf.long_probe import CHUNK, ProbeLogits, probe_judge
from pytest_genguard.hf.teacher import teacher_force_with_preferences

if TYPE_CHECKING:
    import numpy
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = [
    "Backend",
    "Engine",
    "Logits",
    "StreamedLogits",
    "backend_for",
    "engine_chunks",
    "forced_engine_logits",
    "install_command",
]

Logits = Callable[[Sequence[Sequence[int]]], Sequence["numpy.ndarray[Any, Any]"]]
"""A loaded engine: token id sequences in, each sequence's raw logits ``[len, vocab]`` (float32) out."""


@runtime_checkable
class StreamedLogits(Protocol):
    """A loaded engine that can also hand one long sequence's logits out a chunk of positions at a time, holding no
    more than a chunk's rows (the long probe at a 262,144-token vocabulary: 2 GB a copy of its 2,048 positions)."""

    def __call__(self, sequences: Sequence[Sequence[int]]) -> Sequence[numpy.ndarray[Any, Any]]: ...

    def chunks(self, ids: Sequence[int], size: int) -> Iterator[numpy.ndarray[Any, Any]]: ...


CONVERSION_FORMAT = 2
"""Bump when a conversion changes for the same model and engine version: old cache entries are then not found (2: the
folder's other files are part of the key)."""
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
"""Files of a model folder that the weights fingerprint covers; every other file (the tokenizer's, the chat template,
the generation config) is hashed into a conversion's key as bytes."""

_MODULES = {
    "ctranslate2": "pytest_genguard.engines.ct2",
    "llama_cpp": "pytest_genguard.engines.llama_cpp",
    "onnxruntime": "pytest_genguard.engines.ort",
}
_PACKAGES = {
    "ctranslate2": ("ctranslate2",),
    "llama_cpp": ("llama_cpp", "gguf"),
    "onnxruntime": ("onnxruntime", "onnx"),
}


def install_command(name: str) -> str:
    """What makes engine `name` importable: genguard's extra, installed from the clone genguard was installed from
    (genguard is not on PyPI: README's install section), e.g. ``pip install "/path/to/pytest-genguard[llama_cpp]"``;
    or the packages the extra names, by themselves."""
    clone, requires = "", list[str]()
    for dist in metadata.distributions(name="pytest-genguard"):  # an editable clone's egg-info may come first
        requires = requires or list(dist.requires or [])
        try:
            url = json.loads(dist.read_text("direct_url.json") or "{}").get("url", "")
        except ValueError:
            continue
        if isinstance(url, str) and url.startswith("file://"):
            clone = url.removeprefix("file://")
            break
    where = "the clone genguard was installed from" if clone else "a clone of pytest-genguard"
    extra = f'extra == "{name.replace("_", "-")}"'
    packages = [r.split(";")[0].strip() for r in requires if extra in r.replace("'", '"')]
    quoted = " ".join(f'"{p}"' for p in packages)
    alone = f"; or the extra's packages alone: pip install {quoted}" if packages else ""
    return f'pip install "{clone or "/path/to/pytest-genguard"}[{name}]" ({where}{alone})'


@dataclasses.dataclass(frozen=True)
class Backend:
    """One engine: its conversion, its loader and what it says about itself."""

    name: str
    version: str
    compute_type: str  # what the engine computes in ("float32": held to the float32 rule)
    convert: Callable[[Path, Path], None]  # save_pretrained folder -> folder of flat files
    load: Callable[[Path], Logits]
    variant: str = ""
    """What else decides the conversion's bytes (llama.cpp's GGUF file type), part of its cache key when set."""
    describe: Callable[[Path], Mapping[str, JSONScalar]] | None = None
    """Fields the trace's environment gets from the converted model it ran (llama.cpp: the GGUF's file type)."""


def backend_for(name: str, **options: str) -> Backend:
    """The backend of engine `name`, importing its module (and so the engine) now; `options` go to its
    ``backend()`` (llama.cpp: ``outtype``, ``kv_cache``)."""
    if name not in _MODULES:
        raise ValueError(f"genguard engines: unknown engine {name!r}; choose one of {', '.join(sorted(_MODULES))}")
    for package in _PACKAGES[name]:
        try:
            importlib.import_module(package)
        except ImportError as exc:
            raise EngineUnavailable(
                f"genguard engine {name!r} needs the package {package!r}, which cannot be imported ({exc}); "
                f"install it with: {install_command(name)}"
            ) from exc
    module = importlib.import_module(_MODULES[name])
    if options and name != "llama_cpp":
        raise ValueError(f"genguard engines: engine {name!r} takes no options, got {', '.join(sorted(options))}")
    backend = module.backend(**options)
    if not isinstance(backend, Backend):
        raise TypeError(
            f"genguard engines: {_MODULES[name]}.backend() returned {type(backend).__name__}, not a Backend"
        )
    return backend


@dataclasses.dataclass(frozen=True)
class Engine:
    """An engine ready to convert models and record traces; `cache_dir` None is genguard's cache dir."""

    backend: Backend
    cache_dir: Path | None = None

    @property
    def name(self) -> str:
        return self.backend.name

    def convert(self, model_dir: Path | str) -> Path:
        """The engine's conversion of the saved model in `model_dir`, built once per weights fingerprint and engine
        version (under a file lock, written to a temp folder and renamed into place)."""
        model, _ = _load_saved(Path(model_dir), need_tokenizer=False)
        return self._converted(Path(model_dir), model)

    def record(
        self,
        model_dir: Path | str,
        *,
        reference: GenerationTrace,
        tokenizer: PreTrainedTokenizerBase | None = None,
        converted: Path | str | None = None,
        logits_processor: Sequence[Any] = (),
    ) -> GenerationTrace:
        """The trace the engine gives along `reference`'s paths, to compare with `reference` (or its snapshot).

        Every step is teacher forced through the engine in one pass per prompt: its raw logits give the logprobs and
        the top-k; the recorded decoding settings' processors (transformers' own) give the processed scores, so
        greedy, sampled and top-k traces are all judged; a greedy step where the engine prefers another token ends
        that prompt's path there, as generation through the engine would. `model_dir` is the `save_pretrained`
        folder (the fingerprint and generation config come from it, and the tokenizer unless `tokenizer` is given);
        `converted` is a conversion you made yourself (default: genguard converts `model_dir`, cached).
        """
        if not isinstance(reference, GenerationTrace):
            raise TypeError(
                f"{self.name}.record(): reference must be a GenerationTrace (a snapshot's trace or record()'s "
                f"result), got {type(reference).__name__}"
            )
        folder = Path(model_dir)
        model, saved_tokenizer = _load_saved(folder, need_tokenizer=tokenizer is None)
        tok = tokenizer if tokenizer is not None else saved_tokenizer
        engine_dir = Path(converted) if converted is not None else self._converted(folder, model)
        return self.record_model(
            model, tok, reference=reference, converted=engine_dir, logits_processor=logits_processor
        )

    def record_model(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        *,
        reference: GenerationTrace,
        converted: Path | str,
        logits_processor: Sequence[Any] = (),
    ) -> GenerationTrace:
        """`record()` with the Hugging Face side already loaded (it gives the generation config, the processors and
        the fingerprint; the logits all come from `converted`): ``genguard check-gguf`` loads it from the GGUF."""
        engine_dir = Path(converted)
        logits = self.backend.load(engine_dir)
        tok = tokenizer
        actual, _ = teacher_force_with_preferences(
            model,
            tok,
            reference,
            logits_processor=list(logits_processor),
            engine=lambda trace, steps: forced_engine_logits(logits, trace, steps),
        )
        return dataclasses.replace(actual, environment=self._environment(actual.environment, engine_dir))

    def fidelity(
        self,
        model_dir: Path | str,
        *,
        reference: GenerationTrace,
        budget: str | Mapping[str, Any] | Budget | None = None,
        converted: Path | str | None = None,
        exact: bool = True,
        probe: bool = True,
    ) -> FidelityReport:
        """How far the engine's conversion is from the saved model, judged by `budget` (`pytest_genguard.fidelity`'s
        presets and limits): every step of `reference`'s paths teacher forced through the engine and compared (a flip
        counts; it never ends a path), the engine's full distribution known at every step. `exact`: the saved model
        is the reference model (`reference` was recorded with it): it is teacher forced too, every figure exact over
        the full vocabulary, and the long probe (`hf.long_probe`, `probe=False` leaves it out) reads a built-in text
        of 2,048 tokens through both. Without it, the KLD is bounded by the trace's recorded top-k."""
        folder = Path(model_dir)
        model, tokenizer = _load_saved(folder, need_tokenizer=True)
        assert tokenizer is not None
        engine_dir = Path(converted) if converted is not None else self._converted(folder, model)
        return self.fidelity_model(
            model, tokenizer, reference=reference, converted=engine_dir, budget=budget, exact=exact, probe=probe
        )

    def fidelity_model(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        *,
        reference: GenerationTrace,
        converted: Path | str | Logits,
        budget: str | Mapping[str, Any] | Budget | None = None,
        exact: bool = True,
        probe: bool = True,
    ) -> FidelityReport:
        """`fidelity()` with the Hugging Face side loaded (`model`: the reference model when `exact`, else only its
        config) and `converted` a conversion, or one already loaded (``genguard check-gguf`` keeps its own)."""
        logits = converted if callable(converted) else self.backend.load(Path(converted))
        steps = max((len(p.steps) for p in reference.prompts), default=0)
        side = probe_judge(model, tokenizer, engine_chunks(logits)) if exact and probe else None
        return judged_logits(
            forced_engine_logits(logits, reference, steps),
            tokenizer,
            reference,
            budget=budget,
            reference_model=model if exact else None,
            probe=side,
            config=model.config,
            where=f"{self.name}.fidelity()",
        )

    def _environment(self, hf: Any, engine_dir: Path) -> dict[str, JSONScalar]:
        """The trace's environment: the host's fields, the engine's in place of the attention implementation."""
        fields = {k: v for k, v in dict(hf).items() if k != "attn_implementation"}
        fields["engine"] = f"{self.backend.name} {self.backend.version}"
        fields["dtype"] = self.backend.compute_type
        fields["engine_values"] = "raw logits, teacher forced; processed scores by transformers' processors"
        if self.backend.describe is not None:
            fields.update(self.backend.describe(engine_dir))
        return fields

    def _converted(self, model_dir: Path, model: PreTrainedModel) -> Path:
        fingerprint = model_fingerprint(model)
        key = cache_key(
            {
                "engine": self.backend.name,
                "version": self.backend.version,
                "compute_type": self.backend.compute_type,
                "weights": fingerprint.weights_hash,
                "config": fingerprint.config_hash,
                "format": CONVERSION_FORMAT,
                "files": folder_files_hash(model_dir),
                **({"variant": self.backend.variant} if self.backend.variant else {}),
            }
        )
        root = (self.cache_dir or default_cache_dir()) / "engines" / self.backend.name

        def build(tmp: Path) -> tuple[None, dict[str, Any]]:
            self.backend.convert(model_dir, tmp)
            return None, {"engine": self.backend.name, "version": self.backend.version, "source": str(model_dir)}

        return fetch(root, key, build=build, load=lambda entry, manifest: None).path


def folder_files_hash(folder: Path) -> str:
    """sha256 over the names and bytes of a model folder's files other than its weights: an engine's copy embeds the
    tokenizer and chat template, which the weights and config fingerprint does not see (a tokenizer changed in place
    would otherwise be served from the old copy)."""
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.name.endswith(WEIGHT_SUFFIXES):
            digest.update(str(path.relative_to(folder)).encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _load_saved(folder: Path, *, need_tokenizer: bool) -> tuple[PreTrainedModel, PreTrainedTokenizerBase | None]:
    """The Hugging Face model (and tokenizer) saved in `folder`, or an error that names the folder and the fix."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not (folder / "config.json").is_file():
        raise FileNotFoundError(
            f"genguard engines: {folder} holds no config.json; pass the folder written by "
            "model.save_pretrained(folder) (and tokenizer.save_pretrained(folder), or tokenizer=...)"
        )
    model = AutoModelForCausalLM.from_pretrained(folder)
    model.eval()
    tokenizer = None
    if need_tokenizer:
        try:
            tokenizer = AutoTokenizer.from_pretrained(folder)
        except (OSError, ValueError) as exc:
            raise FileNotFoundError(
                f"genguard engines: no tokenizer in {folder} ({exc}); save it there with "
                "tokenizer.save_pretrained(folder), or pass tokenizer=..."
            ) from None
    return model, tokenizer


def forced_engine_logits(logits: Logits, trace: GenerationTrace, steps: int) -> torch.Tensor:
    """``[prompts, steps, vocab]``: the engine's logits at the positions that predict each recorded step (each
    prompt run on its own, unpadded; steps past a prompt's end stay zero and are never read)."""
    import torch

    sequences = [list(p.prompt_ids) + [s.token_id for s in p.steps[:-1]] for p in trace.prompts]
    outputs = logits([s for s in sequences if s])
    vocab = int(outputs[0].shape[-1]) if len(outputs) else 0
    out = torch.zeros((len(trace.prompts), steps, vocab), dtype=torch.float32)
    rows = iter(outputs)
    for b, (p, sequence) in enumerate(zip(trace.prompts, sequences, strict=True)):
        if not sequence:
            continue
        row = next(rows)
        start = len(p.prompt_ids) - 1
        if p.steps and start >= 0:
            out[b, : len(p.steps)] = torch.from_numpy(row[start : start + len(p.steps)].astype("float32"))
    return out


def engine_chunks(logits: Logits) -> ProbeLogits:
    """An engine as a side of the long probe, `CHUNK` positions at a time: streamed where the engine can
    (`StreamedLogits`), else its one pass over the ids cut into chunks."""

    def chunks(ids: Sequence[int]) -> Iterator[torch.Tensor]:
        import torch

        if isinstance(logits, StreamedLogits):
            for rows in logits.chunks(list(ids), CHUNK):
                yield torch.from_numpy(rows)
            return
        (row,) = logits([list(ids)])
        for start in range(0, len(ids), CHUNK):
            yield torch.from_numpy(row[start : start + CHUNK].astype("float32", copy=False))

    return chunks
