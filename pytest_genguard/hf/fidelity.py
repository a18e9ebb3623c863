"""`fidelity()`: how far a model (a bf16 cast, an int8 or int4 quantization) is from the reference it was tested as,
teacher forced along the reference trace's paths, and whether that is within a budget.

The candidate is forced along every recorded path (one forward pass for the batch, `hf.teacher.forced_logits`), so
every reference step counts, also where the candidate's own greedy path would leave it. With `reference_model` the
reference side is forced the same way and every metric is exact: full vocabulary, float64 log-softmax of both sides.
Without it the reference side is the trace's recorded top-k, and the KLD is the lower bound of
`pytest_genguard.core.fidelity` (the candidate's side is still its full distribution). The metrics, their llama.cpp
definitions and the budgets are in `core/fidelity.py` and `core/budget.py`.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pytest_genguard.core.baseline import baseline_budget
from pytest_genguard.core.budget import (
    CALIBRATED_METRICS,
    CALIBRATIONS,
    DEFAULT_CALIBRATION,
    Budget,
    FidelityReport,
    budget_of,
    calibration_key,
)
from pytest_genguard.core.fidelity import StepFidelity, aggregate, bounded_step
from pytest_genguard.core.long_context import coverage
from pytest_genguard.core.trace import GenerationTrace
from pytest_genguard.hf._generation import token_texts
from pytest_genguard.hf.full_vocabulary import exact_steps, tops
from pytest_genguard.hf.long_probe import ProbeJudge, model_chunks, probe_judge, window_and_context
from pytest_genguard.hf.reference_copies import reference_copy
from pytest_genguard.hf.teacher import forced_logits
from pytest_genguard.hf.weights_hash import weights_hash

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = [
    "Baseline",
    "calibrate",
    "calibration_figures",
    "fidelity",
    "fidelity_steps",
    "judged_logits",
    "reference_logits",
    "steps_from_logits",
]

_KEEP = 4  # traces kept per reference model: SmolLM2-135M's 4 prompts x 48 steps are 38 MB
_KEPT: weakref.WeakKeyDictionary[Any, dict[tuple[str, int, tuple[Any, ...]], torch.Tensor]] = (
    weakref.WeakKeyDictionary()
)


def fidelity(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    reference: GenerationTrace,
    *,
    budget: str | Mapping[str, Any] | Budget | None = None,
    reference_model: PreTrainedModel | None = None,
    probe: bool = True,
    baseline: PreTrainedModel | None = None,
) -> FidelityReport:
    """How far `model` is from the model that recorded `reference`, teacher forced along its paths.

    `budget` is a preset name (``"bf16"``, ``"fp16"``, ``"int8"``, ``"int4"``), a mapping of limits
    (``{"kld_mean": 1e-4}``) or a `Budget`; the report's `.holds` says whether the candidate kept it (True without
    a budget). A preset's limits are multiples of what genguard's own conversion of the reference model to that
    precision costs (`calibrate`): taken from `reference` when it stores them, else measured on `reference_model`;
    with neither, the preset's fixed limits apply and the report says so. `reference_model` (the model the trace
    was recorded with, in process) makes every metric exact; without it the KLD is a lower bound from the trace's
    recorded top-k, and the report says so. With `reference_model` the long probe (`hf.long_probe`: a built-in text
    of 2,048 tokens, past any sliding window) is read through both models too and judged by the same budget, band by
    band (`probe=False` leaves it out).

    `baseline` (instead of a budget) judges `model` against another copy of the same reference model, a known-good
    one (the quantization you shipped): both are measured here against the same reference, and `model`'s KLD may
    exceed `baseline`'s by `core.baseline.ALLOWANCE` alone, on the paths and in every band of the probe.
    """
    if not isinstance(reference, GenerationTrace):
        raise TypeError(
            f"fidelity(): reference must be a GenerationTrace (from record() or GenerationTrace.from_json()), "
            f"got {type(reference).__name__}"
        )
    side = known = None
    if probe and reference_model is not None:
        side = probe_judge(reference_model, tokenizer, model_chunks(model))
    if baseline is not None:
        known_probe = None if side is None else probe_judge(reference_model, tokenizer, model_chunks(baseline))
        known = Baseline(forced_logits(baseline, tokenizer, reference), known_probe, "model")
    return judged_logits(
        forced_logits(model, tokenizer, reference),
        tokenizer,
        reference,
        budget=budget,
        reference_model=reference_model,
        probe=side,
        config=(reference_model if reference_model is not None else model).config,
        baseline=known,
    )


@dataclasses.dataclass(frozen=True)
class Baseline:
    """A known-good copy of the reference model as a candidate is judged against it: its raw logits along the
    reference's paths, its long probe (None: no probe) and its name for the report."""

    logits: torch.Tensor
    probe: ProbeJudge | None
    name: str


def judged_logits(
    candidate: torch.Tensor,
    tokenizer: PreTrainedTokenizerBase,
    reference: GenerationTrace,
    *,
    budget: str | Mapping[str, Any] | Budget | None,
    reference_model: PreTrainedModel | None = None,
    probe: ProbeJudge | None = None,
    config: Any = None,
    where: str = "fidelity()",
    baseline: Baseline | None = None,
) -> FidelityReport:
    """The report on a candidate whose raw logits along `reference`'s paths are `candidate` (``[prompts, steps,
    vocab]``: a torch model's `forced_logits`, an engine's): every step compared, the candidate's full distribution
    known (complete), exact with `reference_model`. `probe` is the candidate's long probe (`hf.long_probe.probe_judge`),
    judged by the budget as given; `config` gives the sliding window and context of the coverage line. `baseline`
    replaces the budget: the limits are its own figures, measured the same way (`core.baseline`)."""
    if baseline is not None and budget is not None:
        raise ValueError(f"{where}: pass a budget or a baseline, not both (a baseline sets the limits itself)")
    limits = budget_of(budget, where=where)
    raw = limits
    if limits is not None and limits.precision is not None and limits.ratios:
        calibration = _calibration(reference, limits.precision, reference_model, tokenizer)
        limits = limits.calibrated(calibration, bounded=reference_model is None)
    base = None if reference_model is None else reference_logits(reference_model, tokenizer, reference)
    steps = steps_from_logits(candidate, reference, base)
    if baseline is not None:
        limits = baseline_budget(steps_from_logits(baseline.logits, reference, base), baseline.name)
    window, context = window_and_context(config) if config is not None else (None, None)
    judged_probe = info = None
    if probe is not None and baseline is not None and baseline.probe is not None:
        judged_probe, info = probe.against(baseline.probe, baseline.name)
    elif probe is not None:
        judged_probe, info = probe(raw)
    ids = {i for s in steps for i, _ in (*s.reference_top, *s.candidate_top)} | {s.token_id for s in steps}
    return FidelityReport(
        tuple(steps),
        limits,
        token_texts=token_texts(tokenizer, sorted(ids)),
        prompts=tuple(p.prompt for p in reference.prompts),
        coverage=coverage(reference, sliding_window=window, context=context),
        probe=judged_probe,
        probe_info=info,
    )


def fidelity_steps(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    reference: GenerationTrace,
    *,
    reference_model: PreTrainedModel | None = None,
    forced: torch.Tensor | None = None,
) -> list[StepFidelity]:
    """The per-step metrics of `fidelity()` (exact with `reference_model`, else with the KLD bounded). `forced`:
    `model`'s `forced_logits` along `reference`, when the caller has them already (calibration judges one copy both
    ways)."""
    candidate = forced_logits(model, tokenizer, reference) if forced is None else forced
    base = None if reference_model is None else reference_logits(reference_model, tokenizer, reference)
    return steps_from_logits(candidate, reference, base)


def reference_logits(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, trace: GenerationTrace
) -> torch.Tensor:
    """The reference model's `forced_logits` along `trace`, computed once per model state, tokenizer and paths (kept
    while the model lives, one state per model): every copy that `calibrate` or `fidelity(reference_model=)` judges
    against the same reference reads the same reference side, so it is forced once, not once per candidate."""
    paths = tuple((p.prompt_ids, tuple(s.token_id for s in p.steps)) for p in trace.prompts)
    key = (weights_hash(model), id(tokenizer), paths)
    kept = _KEPT.setdefault(model, {})
    if key not in kept:
        if any(k[0] != key[0] for k in kept):
            kept.clear()  # one state per model: an edited model drops the old logits
        while len(kept) >= _KEEP:
            del kept[next(iter(kept))]  # the oldest trace's first
        kept[key] = forced_logits(model, tokenizer, trace)
    return kept[key]


def steps_from_logits(
    candidate: torch.Tensor, reference: GenerationTrace, base: torch.Tensor | None = None
) -> list[StepFidelity]:
    """Every step of every reference path from the candidate's raw logits ``[prompts, steps, vocab]`` (a flip is
    counted, never the end of a path): exact against the reference model's logits `base`, else the KLD bounded over
    the trace's recorded top-k (the candidate's side complete). The float64 work runs one prompt at a time."""
    import torch

    if base is not None and base.shape[-1] != candidate.shape[-1]:
        raise ValueError(
            f"the candidate's vocabulary has {candidate.shape[-1]} tokens, the reference model's {base.shape[-1]}: "
            "they are not the same model's (compare a candidate with the model it was converted from)"
        )
    out: list[StepFidelity] = []
    for b, p in enumerate(reference.prompts):
        n = len(p.steps)
        if n == 0:
            continue
        tokens = list(p.token_ids)
        lq = torch.log_softmax(candidate[b, :n].double(), dim=-1).cpu()
        if base is None:
            out += _bounded(b, p.steps, lq)
        else:
            out += exact_steps(torch.log_softmax(base[b, :n].double(), dim=-1).cpu(), lq, tokens, prompt=b)
    return out


def _bounded(prompt: int, steps: Sequence[Any], lq: torch.Tensor) -> list[StepFidelity]:
    """A path's steps against the trace's recorded top-k: the candidate's full float64 logprobs `lq` ``[steps, V]``
    give its side of every known id (complete)."""
    import torch

    token = torch.tensor([s.token_id for s in steps], dtype=torch.long).unsqueeze(-1)
    rank = (lq > lq.gather(-1, token)).sum(-1).tolist()
    top1 = lq.argmax(-1).tolist()  # the first of tied ids, as greedy decoding picks (topk may order ties else)
    cand_top = tops(lq)
    out = []
    for t, step in enumerate(steps):
        known = sorted({*step.top_ids, step.token_id})
        q = dict(zip(known, lq[t, known].tolist(), strict=True))
        out.append(bounded_step(prompt, t, step, q, candidate_top=cand_top[t], rank=rank[t], top1=top1[t]))
    return out


def _calibration(
    reference: GenerationTrace, precision: str, reference_model: PreTrainedModel | None, tokenizer: Any
) -> Mapping[str, Any] | None:
    """The reference's calibration figures for `precision`: stored in it, else measured on `reference_model`."""
    if calibration_key(precision, "kld_mean") in reference.calibration:
        return reference.calibration
    if reference_model is None:
        return None
    return calibration_figures(reference_model, tokenizer, reference, (precision,), bounds=False)


def calibration_figures(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    trace: GenerationTrace,
    precisions: Iterable[str] = DEFAULT_CALIBRATION,
    *,
    bounds: bool = True,
) -> dict[str, float]:
    """``{"bf16.kld_mean": ..., "bf16.kld_p99": ..., ...}``: what each reference copy
    (`hf.reference_copies.reference_copy`) costs against `model` along `trace`'s paths, exactly (`trace` must have
    been recorded with `model`); and as the lower bounds over the trace's recorded top-k that a check without the
    model measures (``"bf16.bound.kld_mean"``), unless `bounds` is False (a judgement with the reference model in
    process is exact and needs none). Each copy is teacher forced once: both figures come from its forced logits."""
    out: dict[str, float] = {}
    for precision in precisions:
        candidate = reference_copy(model, precision)
        forced = forced_logits(candidate, tokenizer, trace)
        metrics = aggregate(fidelity_steps(candidate, tokenizer, trace, reference_model=model, forced=forced))
        # The same copy as a server or a trace-only check sees it: lower bounds over the trace's recorded top-k.
        bounded = aggregate(fidelity_steps(candidate, tokenizer, trace, forced=forced)) if bounds else None
        del candidate, forced
        for key in CALIBRATED_METRICS:
            out[calibration_key(precision, key)] = float(metrics[key])
            if bounded is not None and key.startswith("kld"):
                out[calibration_key(precision, f"bound.{key}")] = float(bounded[key])
    return out


def calibrate(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    trace: GenerationTrace,
    precisions: Iterable[str] = DEFAULT_CALIBRATION,
) -> GenerationTrace:
    """`trace` with `model`'s calibration stored in it (``calibration``): what its own bf16, fp16, int8 and int4
    conversions cost along `trace`'s paths, and its attention over llama.cpp's default f16 KV cache (``kv-f16``; the
    other cache types, ``kv-bf16``, ``kv-q8_0``, ``kv-q4_0``, on request), the scale of the fidelity presets wherever
    the trace is judged later (a server, a GGUF, ``genguard fidelity``). One teacher-forced pass per precision (36 s
    for SmolLM2-135M's four whole-model conversions)."""
    if not isinstance(trace, GenerationTrace):
        raise TypeError(f"calibrate(): trace must be a GenerationTrace, got {type(trace).__name__}")
    for precision in precisions:
        if precision not in CALIBRATIONS:
            raise ValueError(f"calibrate(): unknown precision {precision!r}; known: {', '.join(CALIBRATIONS)}")
    figures: dict[str, Any] = dict(trace.calibration)
    figures.update(calibration_figures(model, tokenizer, trace, precisions))
    return dataclasses.replace(trace, calibration=dict(sorted(figures.items())))
