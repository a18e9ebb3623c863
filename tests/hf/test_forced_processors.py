"""Logits processors applied to every teacher-forced step at once give what the processors give step by step, as
`generate()` calls them: for every processor verify() re-applies, on paths full of repeats, with left padding, on the
installed transformers version (run on 4.57 too: its repetition penalty counts the padding, 5.x skips it)."""

from __future__ import annotations

import copy
import types
from typing import Any

import pytest
import torch
from hypothesis import given, settings, strategies as st
from transformers import LogitsProcessorList

from pytest_genguard import strategies
from pytest_genguard.hf.forced_processors import apply_along_path
from pytest_genguard.hf.rebuilt_processors import build_processors
from pytest_genguard.hf.tiny import tiny_model

GENGUARD = settings.get_profile(strategies.PROFILE)
VOCAB = 40  # a small vocabulary over a few distinct ids: repeats and recurring n-grams on every path
EOS = 2
PAD = 0


@pytest.fixture(scope="module")
def model() -> Any:
    return tiny_model("gpt2")


def _step_by_step(processors: LogitsProcessorList, logits: torch.Tensor, sequences: torch.Tensor, start: int) -> Any:
    """What generate() does: the list called on each step's scores with the ids so far."""
    return torch.stack(
        [processors(sequences[:, : start + t], logits[:, t].clone()) for t in range(logits.shape[1])], dim=1
    )


@st.composite
def batches(draw: st.DrawFn) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """Random logits [B, T, V], left-padded prompt + path ids over a few distinct tokens, and the prompt mask."""
    batch = draw(st.integers(1, 3))
    start = draw(st.integers(1, 6))
    steps = draw(st.integers(1, 24))
    alphabet = draw(st.lists(st.integers(3, VOCAB - 1), min_size=1, max_size=5, unique=True))
    seed = draw(st.integers(0, 2**16))
    generator = torch.Generator().manual_seed(seed)
    choice = torch.tensor(alphabet)[torch.randint(len(alphabet), (batch, start + steps), generator=generator)]
    mask = torch.ones((batch, start), dtype=torch.long)
    for b in range(batch):
        padding = draw(st.integers(0, start - 1))
        mask[b, :padding] = 0
        choice[b, :padding] = PAD
    logits = torch.randn((batch, steps, VOCAB), generator=generator) * 3
    logits[logits.abs() < 0.5] = 0.0  # exact zeros: the penalty's sign test at the boundary
    return logits, choice, mask, start


@st.composite
def decoding_settings(draw: st.DrawFn) -> dict[str, Any]:
    """A trace's settings (as record() stores them) with every processor verify() re-applies."""
    out: dict[str, Any] = {
        "repetition_penalty": draw(st.sampled_from((None, 0.8, 1.2, 2.0))),
        "no_repeat_ngram_size": draw(st.sampled_from((None, 1, 2, 3, 4))),
        "min_new_tokens": draw(st.sampled_from((None, 1, 5, 30))),
        "max_new_tokens": 24,
    }
    if draw(st.booleans()):
        out.update(
            do_sample=True,
            temperature=draw(st.sampled_from((None, 0.5, 1.3))),
            top_k=draw(st.sampled_from((None, 0, 1, 7))),
            top_p=draw(st.sampled_from((None, 0.5, 0.9))),
            min_p=draw(st.sampled_from((None, 0.05, 0.3))),
            typical_p=draw(st.sampled_from((None, 0.6, 0.95))),
        )
    return out


@st.composite
def generation_configs(draw: st.DrawFn) -> dict[str, Any]:
    """Processors from the model's generation config that traces do not record (applied step by step)."""
    return {
        "min_length": draw(st.sampled_from((0, 4, 9))),
        "suppress_tokens": draw(st.sampled_from((None, [5, 7]))),
        "begin_suppress_tokens": draw(st.sampled_from((None, [3, 4]))),
        "forced_eos_token_id": draw(st.sampled_from((None, EOS))),
    }


def _with_generation_config(model: Any, values: dict[str, Any]) -> Any:
    """What build_processors() reads of a model: its generation config, here with `values` set."""
    config = copy.deepcopy(model.generation_config)
    config.eos_token_id = EOS
    for key, value in values.items():
        setattr(config, key, value)
    return types.SimpleNamespace(generation_config=config)


@settings(GENGUARD, max_examples=150)
@given(batch=batches(), decoding=decoding_settings(), generation=generation_configs())
def test_all_steps_at_once_equal_the_processors_step_by_step(
    model: Any, tokenizer: Any, batch: Any, decoding: dict[str, Any], generation: dict[str, Any]
) -> None:
    logits, sequences, mask, start = batch
    processors = build_processors(
        _with_generation_config(model, generation), tokenizer, decoding, prompt_length=start, prompt_mask=mask
    )
    expected = _step_by_step(processors, logits, sequences, start)
    actual = apply_along_path(processors, logits, sequences, start)
    assert actual.shape == expected.shape
    assert torch.equal(actual, expected), [type(p).__name__ for p in processors]


@pytest.mark.parametrize(
    ("settings_", "generation", "processor"),
    [
        ({"repetition_penalty": 1.5}, {}, "RepetitionPenaltyLogitsProcessor"),
        ({"no_repeat_ngram_size": 2}, {}, "NoRepeatNGramLogitsProcessor"),
        ({"min_new_tokens": 4}, {}, "MinNewTokensLengthLogitsProcessor"),
        ({}, {"min_length": 6}, "MinLengthLogitsProcessor"),
    ],
)
def test_a_processor_applied_one_step_late_is_told_apart(
    model: Any, tokenizer: Any, settings_: dict[str, Any], generation: dict[str, Any], processor: str
) -> None:
    """Negative control: the equality above is sensitive to which step's ids a processor sees."""
    generator = torch.Generator().manual_seed(0)
    start, steps = 3, 12
    sequences = torch.tensor([[5, 6, 5, 6, 5, 6, 7, 5, 6, 5, 6, 7, 5, 6, 8]])
    logits = torch.randn((1, steps, VOCAB), generator=generator)
    mask = torch.ones((1, start), dtype=torch.long)
    processors = build_processors(
        _with_generation_config(model, generation),
        tokenizer,
        {**settings_, "max_new_tokens": steps},
        prompt_length=start,
        prompt_mask=mask,
    )
    assert [type(p).__name__ for p in processors] == [processor]
    expected = _step_by_step(processors, logits, sequences, start)
    assert torch.equal(apply_along_path(processors, logits, sequences, start), expected)
    assert not torch.equal(_step_by_step(processors, logits, sequences, start + 1), expected)


def test_the_logits_are_left_as_they_are(model: Any, tokenizer: Any) -> None:
    logits = torch.randn((2, 6, VOCAB))
    before = logits.clone()
    sequences = torch.randint(3, 8, (2, 9))
    processors = build_processors(
        _with_generation_config(model, {}),
        tokenizer,
        {"repetition_penalty": 1.3, "do_sample": True, "temperature": 0.7, "top_k": 3},
        prompt_length=3,
        prompt_mask=torch.ones((2, 3), dtype=torch.long),
    )
    apply_along_path(processors, logits, sequences, 3)
    assert torch.equal(logits, before)
