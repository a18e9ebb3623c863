"""Logits processors written in the common in-place idioms cannot touch the raw logprobs record() stores: the trace
holds what the model computed, and verify() of the trace record() just made holds (issue 32)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from invariant_support import PROBES
from transformers import LogitsProcessor, LogitsProcessorList

from pytest_genguard import verify
from pytest_genguard.core.verdict import Verdict
from pytest_genguard.hf import raw_logits_guard
from pytest_genguard.hf.record import record

BANNED = 7  # a token id the processors rule out or push down


class BanByIndex(LogitsProcessor):
    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        scores[:, BANNED] = -float("inf")
        return scores


class BanByMask(LogitsProcessor):
    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        mask = torch.zeros_like(scores, dtype=torch.bool)
        mask[:, BANNED] = True
        return scores.masked_fill_(mask, -float("inf"))  # type: ignore[return-value]


class AddBias(LogitsProcessor):
    def __init__(self, vocab: int) -> None:
        self.bias = torch.linspace(-1.0, 1.0, vocab)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        scores += self.bias
        return scores


def _processors(vocab: int) -> list[Any]:
    return [BanByIndex(), BanByMask(), AddBias(vocab)]


@pytest.mark.parametrize("index", range(3), ids=["scores[:, i] = -inf", "masked_fill_", "scores += bias"])
def test_an_in_place_processor_leaves_the_raw_logprobs_as_the_model_computed_them(
    gpt2: Any, tokenizer: Any, one_thread: None, index: int
) -> None:
    processor = _processors(gpt2.config.vocab_size)[index]
    plain = record(gpt2, tokenizer, PROBES[:2], max_new_tokens=1)
    processed = record(gpt2, tokenizer, PROBES[:2], max_new_tokens=1, logits_processor=LogitsProcessorList([processor]))
    for p, q in zip(plain, processed, strict=True):
        # The first step's raw distribution does not depend on the processors: it is the model's, bit for bit.
        assert q.steps[0].lse == p.steps[0].lse
        assert q.steps[0].top_logprobs == p.steps[0].top_logprobs


@pytest.mark.parametrize("index", range(3), ids=["scores[:, i] = -inf", "masked_fill_", "scores += bias"])
def test_verify_of_the_trace_an_in_place_processor_made_holds(
    gpt2: Any, tokenizer: Any, one_thread: None, index: int
) -> None:
    processor = _processors(gpt2.config.vocab_size)[index]
    trace = record(gpt2, tokenizer, PROBES[:2], max_new_tokens=6, logits_processor=LogitsProcessorList([processor]))
    result = verify(gpt2, tokenizer, trace, logits_processor=[processor])
    assert result.verdict.ok, result.render()


def test_without_the_copy_an_in_place_processor_rewrites_the_raw_logprobs(
    gpt2: Any, tokenizer: Any, one_thread: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Negative control: hand the processors generate()'s own tensor (what record() did before issue 32) and the raw
    # values recorded are the processed ones, so verify() of that trace fails in the same run.
    monkeypatch.setattr(raw_logits_guard, "guarded", lambda processors: processors)
    processor = AddBias(gpt2.config.vocab_size)
    plain = record(gpt2, tokenizer, PROBES[:2], max_new_tokens=1)
    corrupted = record(gpt2, tokenizer, PROBES[:2], max_new_tokens=6, logits_processor=LogitsProcessorList([processor]))
    assert corrupted[0].steps[0].top_logprobs != plain[0].steps[0].top_logprobs
    result = verify(gpt2, tokenizer, corrupted, logits_processor=[processor])
    assert result.verdict is Verdict.REGRESSION, result.render()
