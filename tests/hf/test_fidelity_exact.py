"""`fidelity()` with the reference model in process is exact: checked against a float64 full-vocabulary computation
written here (one forward pass per prompt, as `fidelity()` makes for a one-prompt trace: padded batches round float32
logits differently); without it the KLD is a true lower bound of that value."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest
import quantizers
import torch

import pytest_genguard as gg
from pytest_genguard.core.trace import GenerationTrace


@pytest.fixture(scope="module")
def subject() -> tuple[Any, Any, GenerationTrace]:
    model = quantizers.pinned_llama()
    return model, quantizers.cast(torch.bfloat16)(model), quantizers.reference_trace(model)


def independent(model: Any, trace: GenerationTrace) -> list[torch.Tensor]:
    """Per prompt, float64 log-softmax ``[steps, vocab]`` of the logits predicting each recorded step."""
    out = []
    with torch.no_grad():
        for p in trace.prompts:
            ids = torch.tensor([list(p.prompt_ids) + list(p.token_ids)])
            logits = model(input_ids=ids, use_cache=False).logits[0].double()
            n = len(p.prompt_ids)
            out.append(torch.log_softmax(logits[n - 1 : n - 1 + len(p.steps)], dim=-1))
    return out


def test_exact_metrics_match_an_independent_float64_full_vocabulary_computation(
    subject: tuple[Any, Any, GenerationTrace],
) -> None:
    reference_model, candidate, trace = subject
    steps = []
    for b, p in enumerate(trace.prompts):
        one = dataclasses.replace(trace, prompts=(p,))
        report = gg.fidelity(candidate, gg.tiny_tokenizer(), one, reference_model=reference_model)
        assert report.exact
        steps += [dataclasses.replace(s, prompt=b) for s in report.steps]
    report = gg.FidelityReport(tuple(steps))
    lp_all, lq_all = independent(reference_model, trace), independent(candidate, trace)
    by_step = {(s.prompt, s.step): s for s in steps}
    assert len(by_step) == sum(len(p.steps) for p in trace.prompts)
    klds, reverse = [], []
    for b, p in enumerate(trace.prompts):
        lp, lq = lp_all[b], lq_all[b]
        for t, step in enumerate(p.steps):
            found = by_step[(b, t)]
            kld = float((lp[t].exp() * (lp[t] - lq[t])).sum())
            klds.append(kld)
            reverse.append(float((lq[t].exp() * (lq[t] - lp[t])).sum()))
            assert found.kld == pytest.approx(kld, rel=1e-9, abs=1e-15), (b, t)
            dp = float(lq[t, step.token_id].exp() - lp[t, step.token_id].exp())
            assert found.delta_p == pytest.approx(dp, rel=1e-9, abs=1e-15), (b, t)
            assert found.reference_top1 == int(lp[t].argmax()) and found.candidate_top1 == int(lq[t].argmax())
            assert found.rank == int((lq[t] > lq[t, step.token_id]).sum())
    ordered = sorted(klds)
    assert report.metrics["kld_mean"] == pytest.approx(math.fsum(klds) / len(klds), rel=1e-9)
    assert report.metrics["kld_max"] == pytest.approx(ordered[-1], rel=1e-9)
    assert report.metrics["kld_p99"] == pytest.approx(
        float(torch.tensor(ordered, dtype=torch.float64).quantile(0.99)), rel=1e-9
    )
    # The check is sensitive to the direction: KL(candidate || reference) differs by more than the tolerance.
    assert sum(abs(r - k) > 1e-3 * k for r, k in zip(reverse, klds, strict=True)) > len(klds) // 2


def test_without_the_reference_model_the_kld_is_a_lower_bound_of_the_exact_value(
    subject: tuple[Any, Any, GenerationTrace],
) -> None:
    reference_model, candidate, trace = subject
    exact = gg.fidelity(candidate, gg.tiny_tokenizer(), trace, reference_model=reference_model)
    bound = gg.fidelity(candidate, gg.tiny_tokenizer(), trace)
    assert not bound.exact and "LOWER BOUND" in str(bound) and "covered" in str(bound)
    pairs = list(zip(exact.steps, bound.steps, strict=True))
    # float32-stored reference logprobs against float64 exact ones: the bound may exceed by rounding only
    assert all(b.kld <= e.kld * (1 + 1e-3) + 1e-9 for e, b in pairs)
    assert 0.5 * exact.metrics["kld_mean"] < bound.metrics["kld_mean"] <= exact.metrics["kld_mean"] * (1 + 1e-3)
    assert 0.9 < bound.metrics["covered_mean"] <= 1.0
    assert [b.rank for _, b in pairs] == [e.rank for e, _ in pairs]  # the candidate's side is its full distribution


def test_fidelity_refuses_bad_budgets_and_references_naming_them(subject: tuple[Any, Any, GenerationTrace]) -> None:
    _, candidate, trace = subject
    tokenizer = gg.tiny_tokenizer()
    with pytest.raises(ValueError, match="fidelity\\(\\): unknown fidelity budget 'int2'"):
        gg.fidelity(candidate, tokenizer, trace, budget="int2")
    with pytest.raises(ValueError, match="fidelity\\(\\): unknown fidelity limit 'kld'"):
        gg.fidelity(candidate, tokenizer, trace, budget={"kld": 1.0})
    with pytest.raises(TypeError, match="reference must be a GenerationTrace"):
        gg.fidelity(candidate, tokenizer, trace.to_json())  # type: ignore[arg-type]


def test_the_exact_kld_counts_a_term_by_the_references_mass_alone() -> None:
    from pytest_genguard.hf.full_vocabulary import exact_steps

    inf = math.inf
    # Row 0: the reference gives id 2 no mass (its p underflows to 0) and neither does the candidate (0 * inf): 0.
    # Row 1: the reference gives id 2 mass the candidate gives none: KL is infinite.
    half, quarter = math.log(0.5), math.log(0.25)
    lp = torch.tensor([[half, half, -inf], [half, quarter, quarter]], dtype=torch.float64)
    lq = torch.tensor([[quarter, math.log(0.75), -inf], [half, half, -inf]], dtype=torch.float64)
    first, second = exact_steps(lp, lq, [0, 0])
    assert first.kld == pytest.approx(0.5 * math.log(2) + 0.5 * math.log(0.5 / 0.75), rel=1e-12)
    assert second.kld == inf
