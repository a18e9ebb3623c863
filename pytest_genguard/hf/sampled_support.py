"""What a sampled step's processors kept: its support, the processed probability of each top-k token, and the support
sizes within float error of the thresholds (`core.trace.Support`), from `generate()`'s own output.

`generate()` returns each step's processed scores (after penalties, temperature, top-k, top-p, min-p: removed tokens at
-inf) and raw logits: the support is the finite processed scores, the probabilities their softmax (what sampling
drew from). For the near-threshold range the processors are rebuilt from the trace's settings
(`rebuilt_processors`), those that do not truncate applied along the path (`forced_processors`), and the truncating
ones applied once as recorded (which must give the recorded support, else the range stays the recorded count) and
twice with their thresholds moved by the float error of `core.sampling.band_slack`: stricter and looser.

torch and transformers are imported inside the functions that use them.
"""

from __future__ import annotations

import copy
import math
from typing import TYPE_CHECKING, Any

from pytest_genguard.core.sampling import SamplerSettings, band_slack
from pytest_genguard.core.tolerances import dtype_default
from pytest_genguard.core.trace import Support
from pytest_genguard.hf.forced_processors import TRUNCATING, apply_along_path
from pytest_genguard.hf.rebuilt_processors import build_processors

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["sampled_supports"]

_CHUNK_ELEMENTS = 1 << 22  # steps per pass so that a [batch, steps, vocab] block stays near 16 MB of float32


def sampled_supports(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    settings: dict[str, Any],
    out: Any,
    batch_size: int,
    start: int,
    prompt_mask: torch.Tensor | None,
    top_ids: list[list[list[int]]],
    lse: list[list[float]],
    dtype: str | None,
) -> list[list[Support]] | None:
    """Per step and prompt, the `Support` of a plain sampled `generate()` (None for greedy or beam search, whose
    steps do not sample from one distribution). `top_ids[t][b]` are the recorded raw top-k ids, `lse[t][b]` the raw
    log-sum-exps."""
    import torch

    sampler = SamplerSettings.of(settings)
    if sampler is None or not out.scores or getattr(out, "beam_indices", None) is not None:
        return None
    steps = len(out.scores)
    vocab = out.scores[0].shape[-1]
    ids = torch.tensor(top_ids, dtype=torch.long)  # [T, B, k]
    kept_all: list[list[int]] = []
    probs_all: list[list[list[float]]] = []
    cut_gaps: list[list[float]] = []
    p_maxes: list[list[float]] = []
    chunk = max(1, _CHUNK_ELEMENTS // max(1, batch_size * vocab))
    for first in range(0, steps, chunk):
        span = range(first, min(steps, first + chunk))
        processed = torch.stack([out.scores[t][:batch_size] for t in span]).float()  # [t, B, V]
        finite = torch.isfinite(processed)
        probs = processed.softmax(dim=-1)
        kept_all += finite.sum(dim=-1).tolist()
        probs_all += probs.gather(-1, ids[span.start : span.stop].to(probs.device)).tolist()
        p_max = probs.amax(dim=-1)
        p_min = torch.where(finite, probs, torch.ones_like(probs)).amin(dim=-1)
        cut_gaps += (p_max.clamp_min(1e-45).log() - p_min.clamp_min(1e-45).log()).tolist()
        p_maxes += p_max.tolist()
    ranges = _ranges(
        model,
        tokenizer,
        settings,
        sampler,
        out,
        batch_size,
        start,
        prompt_mask,
        kept_all,
        cut_gaps,
        p_maxes,
        lse,
        dtype,
    )
    return [
        [Support(kept_all[t][b], tuple(probs_all[t][b]), *ranges[t][b]) for b in range(batch_size)]
        for t in range(steps)
    ]


def _ranges(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    settings: dict[str, Any],
    sampler: SamplerSettings,
    out: Any,
    batch_size: int,
    start: int,
    prompt_mask: torch.Tensor | None,
    kept: list[list[int]],
    cut_gaps: list[list[float]],
    p_maxes: list[list[float]],
    lse: list[list[float]],
    dtype: str | None,
) -> list[list[tuple[int, int]]]:
    """Per step and prompt, the support sizes within float error of the thresholds (the recorded count itself where
    the rebuilt processors do not reproduce it: custom processors, a transformers release that differs)."""
    import torch

    exact = [[(k, k) for k in row] for row in kept]
    if not sampler.truncates or settings.get("logits_processor"):
        return exact
    processors = build_processors(model, tokenizer, settings, prompt_length=start, prompt_mask=prompt_mask)
    moving = [p for p in processors if type(p).__name__ not in TRUNCATING]
    cutting = [p for p in processors if type(p).__name__ in TRUNCATING]
    tol = dtype_default(dtype)
    vocab = out.scores[0].shape[-1]
    mass, relative = 0.0, 0.0
    for t, row in enumerate(kept):
        for b, k in enumerate(row):
            m, r = band_slack(
                tol, sampler, cut_gap=cut_gaps[t][b], p_max=p_maxes[t][b], kept=k, lse=lse[t][b], vocab=vocab
            )
            mass, relative = max(mass, m), max(relative, r)
    strict = [_moved(p, -mass, relative) for p in cutting]
    loose = [_moved(p, mass, -relative) for p in cutting]
    sequences = out.sequences
    steps = len(out.scores)
    chunk = max(1, _CHUNK_ELEMENTS // max(1, batch_size * vocab))
    counts: list[list[tuple[int, int]]] = []
    for first in range(0, steps, chunk):
        span = range(first, min(steps, first + chunk))
        raw = torch.stack([out.logits[t][:batch_size] for t in span], dim=1).float()  # [B, t, V]
        pre = apply_along_path(moving, raw, sequences[:batch_size].to(raw.device), start + first) if moving else raw
        as_recorded, low, high = (
            torch.isfinite(apply_along_path(chain, pre, sequences[:batch_size].to(raw.device), start + first))
            .sum(dim=-1)
            .T.tolist()
            for chain in (cutting, strict, loose)
        )
        for t, (again, lo, hi) in enumerate(zip(as_recorded, low, high, strict=True)):
            recorded = kept[first + t]
            counts.append([(min(lo[b], k), max(hi[b], k)) if again[b] == k else (k, k) for b, k in enumerate(recorded)])
    return counts if len(counts) == len(kept) else exact


def _moved(processor: Any, mass: float, relative: float) -> Any:
    """A copy of a truncating processor with its threshold moved: top-p's mass by `mass` (within 0..1), min-p's
    relative threshold by the factor ``exp(relative)`` (a positive `relative` removes more); others as they are."""
    name = type(processor).__name__
    moved = copy.copy(processor)
    if name == "TopPLogitsWarper":
        moved.top_p = min(1.0, max(0.0, float(processor.top_p) + mass))
    elif name == "MinPLogitsWarper":
        moved.min_p = min(1.0, float(processor.min_p) * math.exp(relative))
    return moved
