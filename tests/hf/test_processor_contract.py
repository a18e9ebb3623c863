"""assert_processor_contract: the built-in processors keep their promises; a broken or replaced one is caught."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
import torch
from invariant_support import PROBES, caught
from transformers import LogitsProcessor, LogitsProcessorList
from transformers.generation import logits_process

from pytest_genguard import assert_processor_contract
from pytest_genguard.hf.processors import banned_ngram_tokens
from pytest_genguard.hf.tiny import tiny_model, tiny_tokenizer

CONTRACTS: dict[str, Any] = {
    "no_repeat_ngram_size": 2,
    "repetition_penalty": 1.5,
    "min_new_tokens": 6,
    "temperature": 0.7,
}


@pytest.fixture(scope="module")
def tuned(genguard_finetune: Callable[..., Any]) -> Any:
    return genguard_finetune("gpt2")


@pytest.fixture(scope="module")
def looping() -> tuple[Any, Any]:
    """An untrained GPT-2: it loops, so the no-repeat and penalty processors have work to do."""
    return tiny_model("gpt2"), tiny_tokenizer()


def test_every_contract_holds_on_a_fine_tuned_and_an_untrained_model(tuned: Any, looping: tuple[Any, Any]) -> None:
    assert_processor_contract(tuned.model, tuned.tokenizer, PROBES, max_new_tokens=10, **CONTRACTS)
    assert_processor_contract(*looping, PROBES, max_new_tokens=10, **CONTRACTS)


def test_encoder_decoder_and_beam_search_keep_the_no_repeat_promise(looping: tuple[Any, Any]) -> None:
    t5 = tiny_model("t5")
    assert_processor_contract(
        t5, looping[1], PROBES[:2], max_new_tokens=8, no_repeat_ngram_size=2, repetition_penalty=1.5
    )
    assert_processor_contract(*looping, PROBES[:2], max_new_tokens=8, no_repeat_ngram_size=2, num_beams=3)


class BoostRepeats(LogitsProcessor):
    """A custom processor that pushes the token that would repeat the last (n-1)-gram's continuation."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        boosted = scores.clone()
        for row, ids in enumerate(input_ids.tolist()):
            tail = ids[len(ids) - self.n + 1 :]
            for i in range(len(ids) - self.n + 1):
                if ids[i : i + self.n - 1] == tail:
                    boosted[row, ids[i + self.n - 1]] = 1e4
        return boosted  # type: ignore[return-value]


def test_a_processor_that_lets_an_ngram_repeat_is_caught(tuned: Any) -> None:
    # Negative control: a custom logits processor after the no-repeat one revives the banned tokens.
    processors = LogitsProcessorList([BoostRepeats(2)])
    with caught() as info:
        assert_processor_contract(
            tuned.model, tuned.tokenizer, PROBES, max_new_tokens=8, no_repeat_ngram_size=2, logits_processor=processors
        )
    text = str(info.value)
    assert text.startswith("assert_processor_contract: no_repeat_ngram_size=2 broken (exact check); first: ")
    assert "would repeat a 2-gram but its processed score is 10000, not -inf" in text
    assert "the generated 2-gram" in text and "already occurs at" in text


def _penalty_sign_bug(self: Any, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    score = torch.gather(scores, 1, input_ids) / self.penalty  # divides negative logits too: they go up
    return scores.scatter(1, input_ids, score)


def test_a_repetition_penalty_with_a_sign_bug_is_caught(tuned: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Negative control: a transformers regression of the kind DESIGN.md names (the penalty is sign dependent).
    monkeypatch.setattr(logits_process.RepetitionPenaltyLogitsProcessor, "__call__", _penalty_sign_bug)
    with caught(match=r"seen token: raw logit -[\d.]+ -> processed .*\(raw \* 1\.5\)"):
        assert_processor_contract(tuned.model, tuned.tokenizer, PROBES[:1], max_new_tokens=6, repetition_penalty=1.5)


def test_length_processors_that_do_nothing_are_caught(tuned: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Negative control: transformers 5 enforces min_new_tokens twice (as min_length too); both do nothing here.
    for processor in (logits_process.MinNewTokensLengthLogitsProcessor, logits_process.MinLengthLogitsProcessor):
        monkeypatch.setattr(processor, "__call__", lambda self, ids, scores: scores)
    with caught(match=r"step 0, token '</s>' \(id 2\): EOS score .* before min_new_tokens 6"):
        assert_processor_contract(tuned.model, tuned.tokenizer, PROBES, max_new_tokens=8, min_new_tokens=6)


def test_a_temperature_that_multiplies_is_caught(tuned: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logits_process.TemperatureLogitsWarper, "__call__", lambda self, ids, s: s * self.temperature)
    with caught(match=r"temperature=0\.7: .* expected .* \(raw / 0\.7\)"):
        assert_processor_contract(tuned.model, tuned.tokenizer, PROBES, max_new_tokens=4, temperature=0.7)


def test_banned_tokens_match_transformers_no_repeat_processor() -> None:
    rng = random.Random(0)
    for _ in range(50):
        n = rng.randint(1, 4)
        context = [rng.randrange(6) for _ in range(rng.randint(0, 12))]
        if not context:
            continue
        scores = torch.zeros(1, 6)
        reference = logits_process.NoRepeatNGramLogitsProcessor(n)(torch.tensor([context]), scores)
        expected = {i for i in range(6) if reference[0, i] == -torch.inf}
        assert banned_ngram_tokens(context, n) == expected, (context, n)


def test_contract_arguments_are_checked(tuned: Any) -> None:
    model, tokenizer = tuned.model, tuned.tokenizer
    with pytest.raises(ValueError, match="pass at least one of no_repeat_ngram_size"):
        assert_processor_contract(model, tokenizer, PROBES)
    with pytest.raises(ValueError, match="with beam search only no_repeat_ngram_size can be checked"):
        assert_processor_contract(model, tokenizer, PROBES, repetition_penalty=1.2, num_beams=2)
    with pytest.raises(ValueError, match="no_repeat_ngram_size must be an integer >= 1"):
        assert_processor_contract(model, tokenizer, PROBES, no_repeat_ngram_size=0)
