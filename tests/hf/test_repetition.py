"""assert_no_repetition: loops are caught and quoted; natural text and the fine-tuned models' outputs pass."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest
from invariant_support import PROBES, caught, hand_trace

from pytest_genguard import assert_no_repetition
from pytest_genguard.core.repetition import find_repetition
from pytest_genguard.core.trace import GenerationTrace, PromptTrace, Step
from pytest_genguard.hf.record import record
from pytest_genguard.hf.tiny import corpus_texts, tiny_model, tiny_tokenizer

WORDS = {10: " the", 11: " cat", 12: " sat", 13: " on", 14: " mat", 15: " a", 16: " dog", 17: " ran", 18: "."}


def path(*ids: int) -> list[tuple[int, str]]:
    return [(i, WORDS.get(i, f" w{i}")) for i in ids]


def test_a_token_repeated_past_max_run_is_reported_with_its_steps_and_text() -> None:
    trace = hand_trace(path(10, 11, 12, 12, 12, 12, 12, 13))
    with caught() as info:
        assert_no_repetition(trace)
    first = str(info.value).splitlines()[0]
    assert first.startswith("assert_no_repetition: 1 repetition in 1 of 1 prompt; first: prompt 0 'prompt 0':")
    assert "token ' sat' (id 12) repeats 5 times in a row at steps 2-6 (max_run 4): ' sat sat sat sat sat'" in first
    assert_no_repetition(trace, max_run=5)  # the same path within a looser limit


def test_an_ngram_occurring_too_often_is_reported_with_every_occurrence() -> None:
    loop = path(*([15, 16, 17, 18] * 4))
    with caught() as info:
        assert_no_repetition(hand_trace(loop), min_distinct=0.0)
    text = str(info.value)
    assert "4-gram ' a dog ran.' occurs 4 times (max_ngram_repeats 3) at steps 0, 4, 8, 12" in text
    assert "steps 0-15 read ' a dog ran. a dog ran. a dog ran. a dog ran.'" in text
    assert_no_repetition(hand_trace(loop[:12]), min_distinct=0.0)  # three occurrences are allowed


def test_a_long_period_loop_is_caught_by_the_distinct_ratio() -> None:
    period = [10, 11, 12, 13, 14, 15, 16]  # 7 distinct tokens, then the same 7 again and again: 28 tokens
    trace = hand_trace(path(*(period * 4)))
    assert_no_repetition(trace, min_distinct=0.0, max_ngram_repeats=4)  # only the ratio can see it
    with caught(match=r"only 7 distinct 2-grams among 27 \(distinct-2 0\.26 < min_distinct"):
        assert_no_repetition(trace, max_ngram_repeats=4)


def test_a_final_eos_is_not_counted_and_short_generations_skip_the_ratio() -> None:
    ended = hand_trace([*path(10, 11, 12, 13), (2, "</s>")], finish="eos")
    assert_no_repetition(ended, min_distinct=1.0)  # 3 bigrams: too few for a ratio


def test_a_character_split_over_tokens_is_quoted_as_one_character() -> None:
    e_acute = [(40, "caf\udcc3"), (41, "\udca9")]  # b"caf\xc3" + b"\xa9" = "café"
    trace = hand_trace(e_acute * 5)
    with caught() as info:
        assert_no_repetition(trace)
    assert "'cafécafécafécafécafé'" in str(info.value)


def test_bad_limits_are_rejected_naming_the_argument() -> None:
    trace = hand_trace(path(10))
    with pytest.raises(ValueError, match="max_run must be an integer >= 1"):
        assert_no_repetition(trace, max_run=0)
    with pytest.raises(ValueError, match="min_distinct must be between 0 and 1"):
        assert_no_repetition(trace, min_distinct=1.5)


@functools.cache
def corpus_windows(size: int, stride: int) -> GenerationTrace:
    """Windows of `size` tokens of the shipped corpus (natural text), one per prompt of one trace."""
    tokenizer = tiny_tokenizer()
    ids = tokenizer(" ".join(corpus_texts()))["input_ids"]
    texts = {i: tokenizer.decode([i]) for i in set(ids)}
    windows = []
    for start in range(0, len(ids) - size + 1, stride):
        steps = tuple(Step(i, texts[i], -0.1, 1.0, (i,), (-0.1,)) for i in ids[start : start + size])
        windows.append(PromptTrace(f"corpus tokens {start}-{start + size - 1}", (1,), steps, "length"))
    return GenerationTrace(prompts=tuple(windows))


@pytest.mark.parametrize(("size", "stride"), [(24, 1), (64, 8), (256, 32)])
def test_the_defaults_pass_on_every_window_of_natural_text(size: int, stride: int) -> None:
    windows = corpus_windows(size, stride)
    assert len(windows) > 100
    assert_no_repetition(windows)


def test_a_three_gram_limit_of_two_would_flag_natural_text() -> None:
    # Why the default is 4-grams occurring at most 3 times: plain text repeats a 3-gram three times in 24 tokens.
    with caught(match="3-gram ' the word for' occurs 3 times"):
        assert_no_repetition(corpus_windows(24, 1), ngram_size=3, max_ngram_repeats=2)


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_the_defaults_pass_on_the_fine_tuned_models_outputs(arch: str, genguard_finetune: Callable[..., Any]) -> None:
    tuned = genguard_finetune(arch, pinned=False)
    trace = record(tuned.model, tuned.tokenizer, PROBES, max_new_tokens=24)
    assert all(p.finish_reason == "eos" for p in trace)  # sharp models that stop: the outputs are real sentences
    assert_no_repetition(trace)


def test_a_random_init_model_that_loops_is_caught() -> None:
    # Negative control: an untrained tiny GPT-2 repeats its prompt's last word (' quick quick quick ...').
    trace = record(tiny_model("gpt2"), tiny_tokenizer(), PROBES, max_new_tokens=16)
    with caught(match=r"repeats \d+ times in a row"):
        assert_no_repetition(trace)


def test_find_repetition_is_the_same_rule_without_failing() -> None:
    looping = hand_trace(path(10, 11, 12, 12, 12, 12, 12, 13))
    found = find_repetition(looping)
    assert found and found.prompts == (0,) and found.total_prompts == 1
    with caught() as info:
        assert_no_repetition(looping)
    assert str(info.value).splitlines()[0] == f"assert_no_repetition: {found.headline}"
    assert not find_repetition(looping, max_run=5)  # the same options, the same defaults
    assert not find_repetition(hand_trace(path(10, 11, 12, 13))).headline
    with pytest.raises(ValueError, match="max_run must be an integer >= 1"):
        find_repetition(looping, max_run=0)
