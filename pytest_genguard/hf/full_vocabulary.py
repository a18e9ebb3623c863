"""Exact per-step fidelity from both sides' full distributions: the KLD over the whole vocabulary in float64, Δp,
ranks and top-1s (llama.cpp's definitions, `core/fidelity.py`). `fidelity()` with the reference model in process and
the long probe (`hf.long_probe`) both take their steps here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pytest_genguard.core.fidelity import StepFidelity

if TYPE_CHECKING:
    import torch

__all__ = ["SHOWN", "exact_steps", "tops"]

SHOWN = 5
"""Top-k of each side kept per step for the failure text."""


def tops(logprobs: torch.Tensor) -> list[tuple[tuple[int, float], ...]]:
    """Each step's top-k (id, logprob), best first, for the failure text."""
    values, ids = logprobs.topk(min(SHOWN, logprobs.shape[-1]), dim=-1)
    return [tuple(zip(i, v, strict=True)) for i, v in zip(ids.tolist(), values.tolist(), strict=True)]


def exact_steps(
    lp: torch.Tensor, lq: torch.Tensor, tokens: Sequence[int], *, prompt: int = 0, offset: int = 0
) -> list[StepFidelity]:
    """Exact steps from both sides' float64 logprobs ``[n, V]`` (reference `lp`, candidate `lq`) and the token each
    row predicts: the KLD over the full vocabulary, Δp, ranks, top-1s. `offset` numbers the steps (the probe's
    positions, a chunk at a time)."""
    import torch

    token = torch.tensor(list(tokens), dtype=torch.long).unsqueeze(-1)
    lq_token = lq.gather(-1, token)
    rank = (lq > lq_token).sum(-1).tolist()
    top1 = lq.argmax(-1).tolist()
    p_full = lp.exp()
    # p * (lp - lq) summed where p > 0: a term whose p underflowed to 0 is 0, or NaN (0 * inf, where lq is -inf too),
    # which nansum drops; a p > 0 that the candidate gives no mass stays +inf. In place: at a 262,144-token vocabulary
    # this is 4x faster than a masked copy (torch.where), and one float64 [rows, V] less.
    kld = (lp - lq).mul_(p_full).nansum(-1).clamp(min=0.0).tolist()
    delta_p = (lq_token.exp() - lp.gather(-1, token).exp()).squeeze(-1).tolist()
    ref_top1 = lp.argmax(-1).tolist()
    ref_top, cand_top = tops(lp), tops(lq)
    return [
        StepFidelity(
            prompt=prompt,
            step=offset + t,
            token_id=int(tokens[t]),
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
        for t in range(len(tokens))
    ]
