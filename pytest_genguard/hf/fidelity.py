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
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from pytest_genguard.core.budget import (
    CALIBRATED_METRICS,
    PRECISIONS,
    Budget,
    FidelityReport,
    budget_of,
    calibration_key,
)
from pytest_genguard.core.fidelity import StepFidelity, aggregate, bounded_step
from pytest_genguard.core.trace import GenerationTrace
from pytest_genguard.hf._generation import token_texts
from pytest_genguard.hf.reference_copies import reference_copy
from pytest_genguard.hf.teacher import forced_logits

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["calibrate", "calibration_figures", "fidelity", "fidelity_steps"]

_SHOWN = 5  # top-k of each side kept per step for the failure text


def fidelity(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    reference: GenerationTrace,
    *,
    budget: str | Mapping[str, Any] | Budget | None = None,
    reference_model: PreTrainedModel | None = None,
) -> FidelityReport:
    """How far `model` is from the model that recorded `reference`, teacher forced along its paths.

    `budget` is a preset name (``"bf16"``, ``"fp16"``, ``"int8"``, ``"int4"``), a mapping of limits
    (``{"kld_mean": 1e-4}``) or a `Budget`; the report's `.holds` says whether the candidate kept it (True without
    a budget). A preset's limits are multiples of what genguard's own conversion of the reference model to that
    precision costs (`calibrate`): taken from `reference` when it stores them, else measured on `reference_model`;
    with neither, the preset's fixed limits apply and the report says so. `reference_model` (the model the trace
    was recorded with, in process) makes every metric exact; without it the KLD is a lower bound from the trace's
    recorded top-k, and the report says so.
    """
    if not isinstance(reference, GenerationTrace):
        raise TypeError(
            f"fidelity(): reference must be a GenerationTrace (from record() or GenerationTrace.from_json()), "
            f"got {type(reference).__name__}"
        )
    limits = budget_of(budget, where="fidelity()")
    if limits is not None and limits.precision is not None and limits.ratios:
        calibration = _calibration(reference, limits.precision, reference_model, tokenizer)
        limits = limits.calibrated(calibration, bounded=reference_model is None)
    steps = fidelity_steps(model, tokenizer, reference, reference_model=reference_model)
    ids = {i for s in steps for i, _ in (*s.reference_top, *s.candidate_top)} | {s.token_id for s in steps}
    texts = token_texts(tokenizer, sorted(ids))
    return FidelityReport(tuple(steps), limits, token_texts=texts, prompts=tuple(p.prompt for p in reference.prompts))


def _tops(logprobs: torch.Tensor) -> list[tuple[tuple[int, float], ...]]:
    """Each step's top-k (id, logprob), best first, for the failure text."""
    values, ids = logprobs.topk(min(_SHOWN, logprobs.shape[-1]), dim=-1)
    return [tuple(zip(i, v, strict=True)) for i, v in zip(ids.tolist(), values.tolist(), strict=True)]


def fidelity_steps(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    reference: GenerationTrace,
    *,
    reference_model: PreTrainedModel | None = None,
    forced: torch.Tensor | None = None,
) -> list[StepFidelity]:
    """The per-step metrics of `fidelity()` (exact with `reference_model`, else with the KLD bounded). The float64
    work runs one prompt at a time: ``[steps, vocab]`` in float64, not the whole batch. `forced`: `model`'s
    `forced_logits` along `reference`, when the caller has them already (calibration judges one copy both ways)."""
    import torch

    candidate = forced_logits(model, tokenizer, reference) if forced is None else forced
    base = None if reference_model is None else forced_logits(reference_model, tokenizer, reference)
    out: list[StepFidelity] = []
    for b, p in enumerate(reference.prompts):
        n = len(p.steps)
        if n == 0:
            continue
        token = torch.tensor(p.token_ids, dtype=torch.long).unsqueeze(-1)
        lq = torch.log_softmax(candidate[b, :n].double(), dim=-1).cpu()
        lq_token = lq.gather(-1, token)
        rank = (lq > lq_token).sum(-1).tolist()
        top1 = lq.argmax(-1).tolist()  # the first of tied ids, as greedy decoding picks (topk may order ties else)
        cand_top = _tops(lq)
        if base is None:
            for t, step in enumerate(p.steps):
                known = sorted({*step.top_ids, step.token_id})
                q = dict(zip(known, lq[t, known].tolist(), strict=True))
                out.append(bounded_step(b, t, step, q, candidate_top=cand_top[t], rank=rank[t], top1=top1[t]))
            continue
        lp = torch.log_softmax(base[b, :n].double(), dim=-1).cpu()
        p_full = lp.exp()
        kld = torch.where(p_full > 0, p_full * (lp - lq), torch.zeros_like(lp)).sum(-1).clamp(min=0.0).tolist()
        delta_p = (lq_token.exp() - lp.gather(-1, token).exp()).squeeze(-1).tolist()
        ref_top1 = lp.argmax(-1).tolist()
        ref_top = _tops(lp)
        for t in range(n):
            out.append(
                StepFidelity(
                    prompt=b,
                    step=t,
                    token_id=p.steps[t].token_id,
                    kld=kld[t],
                    delta_p=delta_p[t],
                    reference_top1=ref_top1[t],
                    candidate_top1=top1[t],
                    rank=rank[t],
                    covered=1.0,
                    exact=True,
                    reference_top=ref_top[t],
                    candidate_top=cand_top[t],
                )
            )
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
    precisions: Iterable[str] = PRECISIONS,
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
    precisions: Iterable[str] = PRECISIONS,
) -> GenerationTrace:
    """`trace` with `model`'s calibration stored in it (``calibration``): what its own bf16, fp16, int8 and int4
    conversions cost along `trace`'s paths, the scale of the fidelity presets wherever the trace is judged later (a
    server, a GGUF, ``genguard fidelity``). One teacher-forced pass per precision (36 s for SmolLM2-135M's four)."""
    if not isinstance(trace, GenerationTrace):
        raise TypeError(f"calibrate(): trace must be a GenerationTrace, got {type(trace).__name__}")
    for precision in precisions:
        if precision not in PRECISIONS:
            raise ValueError(f"calibrate(): unknown precision {precision!r}; known: {', '.join(PRECISIONS)}")
    figures: dict[str, Any] = dict(trace.calibration)
    figures.update(calibration_figures(model, tokenizer, trace, precisions))
    return dataclasses.replace(trace, calibration=dict(sorted(figures.items())))
