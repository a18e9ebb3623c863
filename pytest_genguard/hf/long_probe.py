"""The long probe: a built-in public-domain text, thousands of tokens long, teacher forced through the reference model
and a candidate, where the reference model is in process (`fidelity(reference_model=)`, the engines,
``genguard check-gguf --model``, ``--genguard-gguf-model``). A snapshot's short prompts cannot see a rope base, rope
scaling or sliding-window bug (`core.long_context`); the probe reads past the sliding window.

The text (`pytest_genguard/data/long_probe.txt`: the Declaration of Independence, the Gettysburg Address and
Lincoln's Second Inaugural Address, all public domain) is tokenized by the model's tokenizer and cut to
`probe_length()` tokens: at least `PROBE_TOKENS` (2,048), and twice the sliding window when that is longer, but no
more than the model's context (the text is read again from its start when a tokenizer needs more). Both sides give
their logits a chunk of positions at a time (`CHUNK`): the model by chunked prefill through its own KV cache, an
engine from its one pass, and the float64 log-softmax over the full vocabulary is taken `ROWS` positions at a time
(2048 x 262,144 float64, Gemma 3's, would be 4.3 GB a tensor). The reference side is computed once per model state and
kept (`reference_chunks`); the calibration on it (`probe_calibration`) is stored in genguard's cache, keyed by the
model and the environment.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import warnings
import weakref
from collections.abc import Callable, Iterator, Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_genguard.core.baseline import baseline_band_rule, baseline_budget
from pytest_genguard.core.budget import CALIBRATED_METRICS, Budget, FidelityReport, calibration_key
from pytest_genguard.core.errors import CacheFolderError, GenguardCacheWarning
from pytest_genguard.core.fidelity import StepFidelity, aggregate
from pytest_genguard.core.long_context import MIN_BAND, BandRule, ProbeInfo, band_figures, bands, relative_band_rule
from pytest_genguard.hf._generation import inference
from pytest_genguard.hf.cache import CacheCorrupt, cache_key, default_cache_dir, fetch
from pytest_genguard.hf.environment import model_device
from pytest_genguard.hf.full_vocabulary import exact_steps
from pytest_genguard.hf.reference_copies import reference_copy
from pytest_genguard.hf.weights_hash import weights_hash

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = [
    "CALIBRATION_FILE",
    "CHUNK",
    "PROBE_CACHE_FORMAT",
    "PROBE_TOKENS",
    "ROWS",
    "ROW_BYTES",
    "TEXT_NAME",
    "ProbeJudge",
    "ProbeLogits",
    "forget",
    "model_chunks",
    "probe_calibration",
    "probe_ids",
    "probe_judge",
    "probe_length",
    "probe_steps",
    "probe_text",
    "reference_chunks",
    "stored_calibration_key",
    "window_and_context",
]

PROBE_TOKENS = 2048
"""The probe's length in tokens, unless the model's context is shorter (or twice its sliding window longer)."""
CHUNK = 256
"""Positions per chunk of logits: 256 x 262,144 float32 (Gemma 3's vocabulary) is 268 MB a side."""
ROWS = 32
"""Positions per float64 step computation, at most; fewer at a large vocabulary (`ROW_BYTES`): each of its
[rows, vocabulary] tensors is 67 MB at 32 rows of Gemma 3's vocabulary (a whole chunk's were 537 MB, five of them
alive at once: the probe of Gemma 3 270M peaked at 7.4 GB)."""
ROW_BYTES = 16 * 2**20
"""The most a float64 [rows, vocabulary] tensor of the step computation takes. glibc hands allocations above its mmap
threshold (at most 32 MiB) fresh pages from the kernel each time: at Gemma 3's vocabulary 32 rows made a probe fault
in 7.3 million pages, 16 s of system time per 2,048 positions; 8 rows, 2.3 s (the same figures bit for bit)."""
TEXT_NAME = "the built-in long text (the Declaration of Independence, the Gettysburg and Second Inaugural Addresses)"

ProbeLogits = Callable[[Sequence[int]], Iterator["torch.Tensor"]]
"""A side of the probe: the token ids in, their raw logits out, ``[n, vocab]`` float32 per chunk of `CHUNK`
positions (the last chunk shorter), in order."""

_KEPT: weakref.WeakKeyDictionary[Any, dict[tuple[str, int], list[torch.Tensor]]] = weakref.WeakKeyDictionary()
_CALIBRATIONS: weakref.WeakKeyDictionary[Any, dict[tuple[str, int, str], dict[str, float]]] = (
    weakref.WeakKeyDictionary()
)


@functools.cache
def probe_text() -> str:
    """The shipped text."""
    source = resources.files("pytest_genguard").joinpath("data").joinpath("long_probe.txt")
    return source.read_text(encoding="utf-8")


def _text_config(config: Any) -> Any:
    getter = getattr(config, "get_text_config", None)
    return getter() if callable(getter) else config


def window_and_context(config: Any) -> tuple[int | None, int | None]:
    """The model's sliding window (None: no layer has one) and context length (None: not known), from its config."""
    cfg = _text_config(config)
    window = getattr(cfg, "sliding_window", None)
    layer_types = getattr(cfg, "layer_types", None)
    if getattr(cfg, "use_sliding_window", True) is False:
        window = None
    if layer_types is not None and "sliding_attention" not in layer_types:
        window = None
    context = getattr(cfg, "max_position_embeddings", None)
    ok = isinstance(window, int) and window > 0
    return (window if ok else None), (context if isinstance(context, int) and context > 0 else None)


def probe_length(config: Any) -> int:
    """`PROBE_TOKENS`, or twice the sliding window when longer, at most the context length."""
    window, context = window_and_context(config)
    want = max(PROBE_TOKENS, 2 * (window or 0))
    return min(want, context) if context else want


def probe_ids(tokenizer: PreTrainedTokenizerBase, config: Any) -> list[int]:
    """The probe's token ids for this tokenizer (its special tokens as it adds them to a text: a BOS), cut to
    `probe_length()`; the text is read again from its start when it is too short."""
    length = probe_length(config)
    ids = list(tokenizer(probe_text())["input_ids"])
    again = list(tokenizer("\n\n" + probe_text(), add_special_tokens=False)["input_ids"])
    while len(ids) < length and again:
        ids += again
    return ids[:length]


def model_chunks(model: PreTrainedModel, chunk: int = CHUNK) -> ProbeLogits:
    """A model as a side of the probe: chunked prefill through its own KV cache (sliding-window layers included), one
    chunk of logits at a time, float32."""

    def logits(ids: Sequence[int]) -> Iterator[torch.Tensor]:
        import torch
        from transformers import DynamicCache

        device = model_device(model)
        cache = DynamicCache(config=model.config)
        # the forward's cache argument: `cache` since transformers 5.24, `past_key_values` before
        name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        with inference(model):
            for start in range(0, len(ids), chunk):
                part = torch.tensor([list(ids[start : start + chunk])], dtype=torch.long, device=device)
                positions = torch.arange(start, start + part.shape[1], device=device)
                out = model(input_ids=part, use_cache=True, cache_position=positions, **{name: cache})
                yield out.logits[0].float()

    return logits


def forget() -> None:
    """Drop every kept reference side and probe calibration (a benchmark's cold start)."""
    _KEPT.clear()
    _CALIBRATIONS.clear()


def reference_chunks(model: PreTrainedModel, ids: Sequence[int]) -> list[torch.Tensor]:
    """The reference model's probe logits, computed once per model state and ids (kept while the model lives: the
    reference side of every judgement in a session)."""
    key = (weights_hash(model), hash(tuple(ids)))
    kept = _KEPT.setdefault(model, {})
    if key not in kept:
        kept.clear()  # one state per model: an edited model drops the old chunks
        kept[key] = list(model_chunks(model)(ids))
    return kept[key]


def probe_steps(
    reference: Sequence[torch.Tensor], candidate: Iterator[torch.Tensor], ids: Sequence[int]
) -> list[StepFidelity]:
    """Every position of the probe, exact: both sides' chunks in float64 over the full vocabulary, one chunk at a
    time. A step's `step` is the position of the token its row predicts (1 to len(ids) - 1)."""
    import torch

    out: list[StepFidelity] = []
    offset = 0
    for ref, cand in zip(reference, candidate, strict=True):
        if cand.shape[-1] != ref.shape[-1]:
            raise ValueError(
                f"the long probe: the candidate's vocabulary has {cand.shape[-1]} tokens, the reference model's "
                f"{ref.shape[-1]}: they are not the same model's"
            )
        predicted = list(ids[offset + 1 : offset + 1 + ref.shape[0]])
        step = max(1, min(ROWS, ROW_BYTES // (8 * ref.shape[-1])))
        for start in range(0, len(predicted), step):  # float64 over the vocabulary, a few rows at a time
            rows = predicted[start : start + step]
            end = start + len(rows)
            lp = torch.log_softmax(ref[start:end].double(), dim=-1).cpu()
            lq = torch.log_softmax(cand[start:end].double(), dim=-1).cpu()
            out += exact_steps(lp, lq, rows, offset=offset + 1 + start)
        offset += ref.shape[0]
    return out


def probe_calibration(model: PreTrainedModel, ids: Sequence[int], precision: str) -> dict[str, float]:
    """What genguard's own `precision` conversion of `model` costs along the probe, exactly (``{"int8.kld_mean":
    ...}``): the scale of a relative preset's limits on the probe. One more teacher-forced pass of the copy, once per
    model state, ids, precision and environment: stored in genguard's cache (``$GENGUARD_CACHE_DIR``, else the user
    cache folder; `stored_calibration_key`), so a second run, or a second xdist worker, reads it instead. A folder
    that cannot be written is warned about, and the figures measured all the same."""
    key = (weights_hash(model), hash(tuple(ids)), precision)
    kept = _CALIBRATIONS.setdefault(model, {})
    if key not in kept:

        def build(folder: Path) -> tuple[dict[str, float], dict[str, Any]]:
            figures = _measured(model, ids, precision)
            (folder / CALIBRATION_FILE).write_text(json.dumps(figures, sort_keys=True), encoding="utf-8")
            return figures, {"precision": precision}

        root = default_cache_dir() / "long-probe"
        try:
            kept[key] = fetch(root, stored_calibration_key(model, ids, precision), build=build, load=_load).value
        except CacheFolderError as exc:
            warnings.warn(GenguardCacheWarning(f"the long probe's calibration is not stored: {exc}"), stacklevel=2)
            kept[key] = _measured(model, ids, precision)
    return kept[key]


def _measured(model: PreTrainedModel, ids: Sequence[int], precision: str) -> dict[str, float]:
    copy = reference_copy(model, precision)
    steps = probe_steps(reference_chunks(model, ids), model_chunks(copy)(ids), ids)
    del copy
    metrics = aggregate(steps)
    figures = {calibration_key(precision, k): float(metrics[k]) for k in CALIBRATED_METRICS}
    shown = bands(steps, window_and_context(model.config)[0])
    figures.update({calibration_key(precision, k): v for k, v in band_figures(shown).items()})
    return figures


CALIBRATION_FILE = "calibration.json"
PROBE_CACHE_FORMAT = 2
"""Bumped when what `probe_calibration` measures changes (the reference copies, the steps, the metrics, the bands):
part of every stored calibration's key, so old entries are simply not found (2: each band's KLD mean too)."""


def stored_calibration_key(model: PreTrainedModel, ids: Sequence[int], precision: str) -> str:
    """The cache key of a probe calibration: everything its figures depend on. The model's weights and architecture,
    the ids, the precision, and the environment a trace records (torch, transformers, the CPU kernel set, threads,
    the device, dtype and attention implementation): another kernel set rounds the copy's pass differently."""
    from pytest_genguard.hf.environment import environment
    from pytest_genguard.hf.fingerprint import config_hash

    return cache_key(
        {
            "what": "long-probe calibration",
            "format": PROBE_CACHE_FORMAT,
            "weights": weights_hash(model),
            "config": config_hash(model),
            "ids": hashlib.sha256(json.dumps(list(ids)).encode()).hexdigest(),
            "precision": precision,
            "chunk": CHUNK,
            "metrics": list(CALIBRATED_METRICS),
            "min_band": MIN_BAND,
            "environment": environment(model),
        }
    )


def _load(entry: Path, manifest: dict[str, Any]) -> dict[str, float]:
    figures = json.loads((entry / CALIBRATION_FILE).read_text(encoding="utf-8"))
    precision = manifest.get("precision")
    expected = {calibration_key(str(precision), k) for k in CALIBRATED_METRICS}
    band = calibration_key(str(precision), "band.")
    if (
        not isinstance(figures, dict)
        or not expected <= set(figures)
        or not all(k in expected or k.startswith(band) for k in figures)
        or not all(isinstance(v, float) for v in figures.values())
    ):
        raise CacheCorrupt(f"{CALIBRATION_FILE} does not hold the {precision} figures {sorted(expected)} and bands")
    return {str(k): float(v) for k, v in figures.items()}


class ProbeJudge:
    """The long probe of one candidate: read through the reference model and `candidate` once, at the first
    judgement (`steps`), then judged by any budget (`__call__`) or against a baseline's own probe (`against`)."""

    def __init__(
        self,
        reference_model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        candidate: ProbeLogits,
        keep: Callable[[Callable[[], tuple[StepFidelity, ...]]], tuple[StepFidelity, ...]] | None = None,
    ) -> None:
        self.reference_model = reference_model
        self.ids = probe_ids(tokenizer, reference_model.config)
        self.window, self.context = window_and_context(reference_model.config)
        self.candidate = candidate
        self.keep = keep
        """Given the read, the steps: read now, or kept from an earlier judge of the same candidate (a GGUF's file
        state: `engines.gguf_check`)."""
        self._read: tuple[StepFidelity, ...] | None = None

    def _measured(self) -> tuple[StepFidelity, ...]:
        reference = reference_chunks(self.reference_model, self.ids)
        return tuple(probe_steps(reference, self.candidate(self.ids), self.ids))

    def steps(self) -> tuple[StepFidelity, ...]:
        """Every position of the probe, exact (read once)."""
        if self._read is None:
            self._read = self.keep(self._measured) if self.keep is not None else self._measured()
        return self._read

    def _info(self, basis: str) -> ProbeInfo:
        return ProbeInfo(TEXT_NAME, len(self.ids), self.window, self.context, basis)

    def __call__(self, budget: Budget | None) -> tuple[FidelityReport, ProbeInfo]:
        """Judged by `budget`: a relative preset's limits scaled by the reference's own conversion measured on the
        probe (`probe_calibration`; a snapshot's stored calibration is of its own prompts, not of these positions),
        each band's by that conversion's KLD in the same band; other limits as given, in every band alike."""
        limits, basis = budget, "no budget: figures only"
        rule = BandRule(self.window)
        if budget is not None and budget.ratios and budget.precision is not None:
            calibration = probe_calibration(self.reference_model, self.ids, budget.precision)
            limits = budget.calibrated(calibration)
            basis = f"{limits.basis}, both measured on the probe"
            prefix = calibration_key(budget.precision, "")
            figures = {k.removeprefix(prefix): v for k, v in calibration.items() if k.startswith(prefix)}
            what = f"the reference model's own {budget.precision} conversion"
            ratio = dict(budget.ratios).get("kld_mean")
            rule = rule if ratio is None else relative_band_rule(self.window, figures, ratio, what)
        elif budget is not None:
            basis = "the budget's limits as given"
            rule = BandRule(self.window, basis="the budget's kld_mean, in every band")
        report = FidelityReport(self.steps(), limits, prompts=(TEXT_NAME,), band_rule=rule)
        return report, self._info(basis)

    def against(self, baseline: ProbeJudge, name: str) -> tuple[FidelityReport, ProbeInfo]:
        """Judged against `baseline`'s probe (the same reference, the same positions, `core.baseline`): the whole
        probe's mean and p99, and each band's mean, within the allowance of the baseline's."""
        if baseline.ids != self.ids:
            raise ValueError("the long probe: a baseline must be read on the same reference model's probe")
        reference = baseline.steps()
        limits = baseline_budget(reference, name)
        report = FidelityReport(
            self.steps(), limits, prompts=(TEXT_NAME,), band_rule=baseline_band_rule(reference, self.window, name)
        )
        return report, self._info(f"{limits.basis}, on the probe")


def probe_judge(
    reference_model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    candidate: ProbeLogits,
    keep: Callable[[Callable[[], tuple[StepFidelity, ...]]], tuple[StepFidelity, ...]] | None = None,
) -> ProbeJudge:
    """The long probe read through the reference model and `candidate` (once, at the first judgement), judged by a
    budget (`ProbeJudge.__call__`) or against a baseline's probe (`ProbeJudge.against`)."""
    return ProbeJudge(reference_model, tokenizer, candidate, keep)
