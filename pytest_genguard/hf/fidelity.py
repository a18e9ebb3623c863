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

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pytest_genguard.core.budget import Budget, FidelityReport, budget_of
from pytest_genguard.core.fidelity import StepFidelity, bounded_step
from pytest_genguard.core.trace import GenerationTrace
from pytest_genguard.hf._generation import token_texts
from pytest_genguard.hf.teacher import forced_logits

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["fidelity", "fidelity_steps"]

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
    a budget). `reference_model` (the model the trace was recorded with, in process) makes every metric exact; without
    it the KLD is a lower bound from the trace's recorded top-k, and the report says so.
    """
    if not isinstance(reference, GenerationTrace):
        raise TypeError(
            f"fidelity(): reference must be a GenerationTrace (from record() or GenerationTrace.from_json()), "
            f"got {type(reference).__name__}"
        )
    limits = budget_of(budget, where="fidelity()")
    steps = fidelity_steps(model, tokenizer, reference, reference_model=reference_model)
    ids = {i for s in steps for i, _ in (*s.reference_top, *s.candidate_top)} | {s.token_id for s in steps}
    return FidelityReport(tuple(steps), limits, token_texts=token_texts(tokenizer, sorted(ids)))


def _paths(reference: GenerationTrace, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference's path ids ``[prompts, steps]`` (0 past a prompt's end) and the mask of real steps."""
    import torch

    ids = torch.zeros((len(reference.prompts), steps), dtype=torch.long)
    mask = torch.zeros((len(reference.prompts), steps), dtype=torch.bool)
    for b, p in enumerate(reference.prompts):
        if p.steps:
            ids[b, : len(p.steps)] = torch.tensor(p.token_ids, dtype=torch.long)
            mask[b, : len(p.steps)] = True
    return ids, mask


def _tops(logprobs: torch.Tensor) -> tuple[list[Any], list[Any]]:
    values, ids = logprobs.topk(min(_SHOWN, logprobs.shape[-1]), dim=-1)
    return ids.tolist(), values.tolist()


def fidelity_steps(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    reference: GenerationTrace,
    *,
    reference_model: PreTrainedModel | None = None,
) -> list[StepFidelity]:
    """The per-step metrics of `fidelity()` (exact with `reference_model`, else with the KLD bounded)."""
    import torch

    lq = torch.log_softmax(forced_logits(model, tokenizer, reference).double(), dim=-1).cpu()
    ids, mask = _paths(reference, lq.shape[1])
    token = ids.unsqueeze(-1)
    lq_token = lq.gather(-1, token).squeeze(-1)
    rank = (lq > lq_token.unsqueeze(-1)).sum(-1).tolist()
    cand_top1 = lq.argmax(-1).tolist()  # the first of tied ids, as greedy decoding picks (topk may order ties else)
    cand_ids, cand_vals = _tops(lq)
    out: list[StepFidelity] = []
    if reference_model is None:
        for b, p in enumerate(reference.prompts):
            for t, step in enumerate(p.steps):
                known = sorted({*step.top_ids, step.token_id})
                q = dict(zip(known, lq[b, t, known].tolist(), strict=True))
                cand_top = tuple(zip(cand_ids[b][t], cand_vals[b][t], strict=True))
                out.append(bounded_step(b, t, step, q, candidate_top=cand_top, rank=rank[b][t], top1=cand_top1[b][t]))
        return out
    lp = torch.log_softmax(forced_logits(reference_model, tokenizer, reference).double(), dim=-1).cpu()
    p_full = lp.exp()
    kld = torch.where(p_full > 0, p_full * (lp - lq), torch.zeros_like(lp)).sum(-1).clamp(min=0.0).tolist()
    lp_token = lp.gather(-1, token).squeeze(-1)
    delta_p = (lq_token.exp() - lp_token.exp()).tolist()
    ref_top1 = lp.argmax(-1).tolist()
    ref_ids, ref_vals = _tops(lp)
    for b, t in mask.nonzero().tolist():
        out.append(
            StepFidelity(
                prompt=b,
                step=t,
                token_id=int(ids[b, t]),
                kld=kld[b][t],
                delta_p=delta_p[b][t],
                reference_top1=ref_top1[b][t],
                candidate_top1=cand_top1[b][t],
                rank=rank[b][t],
                covered=1.0,
                exact=True,
                reference_top=tuple(zip(ref_ids[b][t], ref_vals[b][t], strict=True)),
                candidate_top=tuple(zip(cand_ids[b][t], cand_vals[b][t], strict=True)),
            )
        )
    return out
