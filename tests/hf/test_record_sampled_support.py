"""`record()` keeps each sampled step's support (`core.trace.Support`): how many tokens transformers' processors kept,
the processed probability of each top-k token, and the counts within float error of the thresholds. Checked against
transformers' own warpers applied to the model's logits along the recorded path (a forward pass over the whole
sequence: other kernels than generate()'s, so a near-threshold count may differ, inside the recorded range), on the
sharpened tiny llama the vLLM tests serve (its distributions are peaked, as a trained model's)."""

from __future__ import annotations

import math
from typing import Any

import pytest
import served_model
import torch
from transformers import (
    GenerationConfig,
    LogitsProcessorList,
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopPLogitsWarper,
)

from pytest_genguard import record

PROMPTS = ["the quick brown fox", "once upon a time"]


@pytest.fixture(scope="module")
def model(one_thread: None) -> Any:
    return served_model.build_model().eval()


def sampled(model: Any, tokenizer: Any, **settings: Any) -> Any:
    config = GenerationConfig(do_sample=True, top_k=0, **settings)
    return record(model, tokenizer, PROMPTS, max_new_tokens=5, seed=0, generation_config=config)


def warped_along_the_path(model: Any, trace: Any, processors: LogitsProcessorList) -> list[list[torch.Tensor]]:
    """Per prompt and step, the processed scores transformers' `processors` give the model's logits there."""
    out = []
    with torch.no_grad():
        for p in trace.prompts:
            ids = torch.tensor([[*p.prompt_ids, *p.token_ids]])
            logits = model(ids).logits[0].float()
            start = len(p.prompt_ids)
            out.append(
                [processors(ids[:, : start + t], logits[start + t - 1 : start + t]) for t in range(len(p.steps))]
            )
    return out


@pytest.mark.parametrize(
    ("settings", "processors"),
    [
        ({"temperature": 1.5, "top_p": 0.9}, [TemperatureLogitsWarper(1.5), TopPLogitsWarper(0.9)]),
        ({"temperature": 0.7, "min_p": 0.1}, [TemperatureLogitsWarper(0.7), MinPLogitsWarper(0.1)]),
        (
            {"temperature": 1.0, "top_p": 0.95, "repetition_penalty": 1.3},
            [RepetitionPenaltyLogitsProcessor(1.3), TopPLogitsWarper(0.95)],
        ),
    ],
)
def test_each_sampled_step_keeps_what_transformers_processors_kept(
    model: Any, tokenizer: Any, settings: dict[str, float], processors: list[Any]
) -> None:
    trace = sampled(model, tokenizer, **settings)
    warped = warped_along_the_path(model, trace, LogitsProcessorList(processors))
    kept_counts = set()
    for p, scores in zip(trace.prompts, warped, strict=True):
        for step, score in zip(p.steps, scores, strict=True):
            support = step.support
            assert support is not None
            kept = int(torch.isfinite(score).sum())
            kept_counts.add(support.kept)
            assert support.low <= kept <= support.high, (support, kept)
            probs = score.softmax(dim=-1)[0]
            for token_id, prob in zip(step.top_ids, support.probs, strict=True):
                assert math.isclose(prob, float(probs[token_id]), rel_tol=1e-3, abs_tol=1e-7), (token_id, prob)
    assert len(kept_counts) > 1  # the steps kept different counts: a real truncation, not the whole vocabulary


def test_a_top_p_on_a_cumulative_boundary_records_both_counts_in_its_range(model: Any, tokenizer: Any) -> None:
    # The mass of the first n tokens as the top-p: whether float32 keeps n or n + 1 is rounding, so the recorded range
    # holds both. Negative control: the same step one token away from any boundary records its count alone.
    plain = sampled(model, tokenizer, temperature=1.0, top_p=0.9)
    first = plain.prompts[0]
    with torch.no_grad():
        logits = model(torch.tensor([list(first.prompt_ids)])).logits[0, -1].double()
    probs = logits.softmax(dim=-1).sort(descending=True).values
    n = 3
    boundary = float(probs[:n].sum())
    on_edge = sampled(model, tokenizer, temperature=1.0, top_p=boundary).prompts[0].steps[0].support
    assert on_edge is not None and on_edge.low <= n <= on_edge.high and on_edge.low < on_edge.high, on_edge
    between = float(probs[:n].sum() + probs[n] / 2)  # half a token past the boundary: n + 1 kept, no doubt
    clear = sampled(model, tokenizer, temperature=1.0, top_p=between).prompts[0].steps[0].support
    assert clear is not None and (clear.low, clear.kept, clear.high) == (n + 1, n + 1, n + 1), clear


def test_greedy_and_beam_steps_keep_no_support_and_their_bytes(model: Any, tokenizer: Any) -> None:
    greedy = record(model, tokenizer, PROMPTS, max_new_tokens=3)
    assert all(s.support is None for p in greedy.prompts for s in p.steps)
    assert '"kept"' not in greedy.to_json() and '"probs"' not in greedy.to_json()
    beams = record(model, tokenizer, PROMPTS[:1], max_new_tokens=3, seed=0, num_beams=2, do_sample=True)
    assert all(s.support is None for p in beams.prompts for s in p.steps)


def test_a_sampled_trace_with_custom_processors_keeps_its_counts_without_a_range(model: Any, tokenizer: Any) -> None:
    class Ban(torch.nn.Module):
        def __call__(self, input_ids: Any, scores: Any) -> Any:
            scores[:, 7] = -math.inf
            return scores

    config = GenerationConfig(do_sample=True, top_k=0, temperature=1.5, top_p=0.9)
    trace = record(
        model, tokenizer, PROMPTS, max_new_tokens=3, seed=0, generation_config=config, logits_processor=[Ban()]
    )
    for p in trace.prompts:
        for s in p.steps:
            assert s.support is not None and s.support.low == s.support.kept == s.support.high
            assert 7 not in s.top_ids or s.support.probs[s.top_ids.index(7)] == 0.0
