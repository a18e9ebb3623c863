"""assert_well_formed: real traces of every arch and mode pass; each broken property is caught, exactly."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest
from invariant_support import EOS, PROBES, caught, hand_trace, noise_processor

from pytest_genguard import assert_well_formed
from pytest_genguard.core.trace import GenerationTrace, Step
from pytest_genguard.hf.record import record
from pytest_genguard.hf.tiny import tiny_model

MODES: dict[str, dict[str, Any]] = {
    "greedy": {},
    "sample": {"do_sample": True, "seed": 3},
    "beam": {"num_beams": 3},
    "penalized": {"repetition_penalty": 1.5, "no_repeat_ngram_size": 2, "min_new_tokens": 4},
}


@pytest.fixture(scope="module")
def greedy(gpt2: Any, tokenizer: Any) -> GenerationTrace:
    return record(gpt2, tokenizer, PROBES[:2], max_new_tokens=6)


def edit(trace: GenerationTrace, prompt: int = 0, step: int = 0, **changes: Any) -> GenerationTrace:
    """`trace` with one step's fields changed."""
    p = trace.prompts[prompt]
    steps = list(p.steps)
    steps[step] = dataclasses.replace(steps[step], **changes)
    prompts = list(trace.prompts)
    prompts[prompt] = dataclasses.replace(p, steps=tuple(steps))
    return dataclasses.replace(trace, prompts=tuple(prompts))


def as_eos(step: Step) -> Step:
    """`step` turned into a plausible EOS step: EOS chosen from outside the top-k (below its k-th logprob)."""
    return dataclasses.replace(step, token_id=EOS, token="</s>", logprob=step.top_logprobs[-1] - 1.0)


def with_steps(trace: GenerationTrace, steps: tuple[Step, ...], finish: str, **settings: Any) -> GenerationTrace:
    p = dataclasses.replace(trace.prompts[0], steps=steps, finish_reason=finish)
    return dataclasses.replace(trace, prompts=(p,), settings={**trace.settings, **settings})


def test_a_real_greedy_trace_is_well_formed(greedy: GenerationTrace) -> None:
    assert greedy.settings["eos_token_id"] == EOS  # stored by record(), read by the EOS checks
    assert_well_formed(greedy)


# Every arch and mode once (tests/hf/test_properties.py draws many more configurations on GPT-2).
@pytest.mark.parametrize(
    ("arch", "mode"),
    [("gpt2", "beam"), ("llama", "sample"), ("llama", "penalized"), ("t5", "penalized"), ("t5", "beam")],
)
def test_real_traces_of_every_arch_and_mode_are_well_formed(arch: str, mode: str, tokenizer: Any) -> None:
    trace = record(tiny_model(arch), tokenizer, PROBES[:2], max_new_tokens=6, **MODES[mode])
    assert_well_formed(trace)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s: {"top_logprobs": tuple(reversed(s.top_logprobs))}, "top-k not sorted best first"),
        (lambda s: {"top_ids": (s.top_ids[0], *s.top_ids[:-1])}, "top_ids repeat an id"),
        (lambda s: {"top_logprobs": (*s.top_logprobs[:-1], math.nan)}, "top_logprobs must be finite and <= 0"),
        (lambda s: {"logprob": math.nan}, "chosen raw logprob nan is not a finite value <= 0"),
        (lambda s: {"logprob": 0.5}, "chosen raw logprob 0.5 is not a finite value <= 0"),
        (lambda s: {"logprob": s.logprob - 1e-3}, "differs from its own top-k entry"),
        (lambda s: {"score": math.inf, "best_score": math.inf}, "processed score inf is not finite"),
        (lambda s: {"score": s.score - 1.0, "best_score": s.score}, "greedy chose a token whose processed score"),
        (
            lambda s: {"token_id": s.top_ids[1], "logprob": s.top_logprobs[1]},
            "greedy without ranking processors must choose the raw argmax, but chose rank 1",
        ),
    ],
)
def test_a_broken_step_is_caught_and_named(greedy: GenerationTrace, change: Any, message: str) -> None:
    step = greedy.prompts[1].steps[2]
    broken = edit(greedy, prompt=1, step=2, **change(step))
    with caught() as info:
        assert_well_formed(broken)
    first = str(info.value).splitlines()[0]
    assert first.startswith("assert_well_formed: ") and "in 1 of 2 prompts (exact checks); first: prompt 1" in first
    assert "step 2" in first and message in first


def test_eos_in_the_middle_of_a_generation_is_caught(greedy: GenerationTrace) -> None:
    steps = greedy.prompts[0].steps
    eos = as_eos(steps[1])
    broken = with_steps(greedy, (steps[0], eos, *steps[2:]), "length")
    with caught(match=r"EOS \(id 2\) at step 1 is followed by 4 more tokens"):
        assert_well_formed(broken, check_raw_argmax=False)


def test_finish_reason_must_match_the_last_token(greedy: GenerationTrace) -> None:
    steps = greedy.prompts[0].steps
    with caught(match=r"finish_reason 'eos' but the last token .* is not EOS \[2\]"):
        assert_well_formed(with_steps(greedy, steps, "eos"))
    with_eos = (*steps[:-1], as_eos(steps[-1]))
    with caught(match=r"finish_reason 'length' but the last token .* is EOS \[2\]"):
        assert_well_formed(with_steps(greedy, with_eos, "length"), check_raw_argmax=False)


def test_lengths_must_fit_the_settings(greedy: GenerationTrace) -> None:
    steps = greedy.prompts[0].steps
    with caught(match="6 steps but max_new_tokens is 5"):
        assert_well_formed(with_steps(greedy, steps, "length", max_new_tokens=5))
    with caught(match="finish_reason 'length' after 4 steps, not max_new_tokens 6"):
        assert_well_formed(with_steps(greedy, steps[:4], "length"))
    with caught(match="empty generation"):
        assert_well_formed(with_steps(greedy, (), "eos"))


def test_eos_before_min_new_tokens_is_caught(greedy: GenerationTrace) -> None:
    steps = greedy.prompts[0].steps[:3]
    ended = (*steps[:-1], as_eos(steps[-1]))
    assert_well_formed(with_steps(greedy, ended, "eos"), check_raw_argmax=False)
    with caught(match="EOS at step 2, before min_new_tokens 4 tokens were generated"):
        assert_well_formed(with_steps(greedy, ended, "eos", min_new_tokens=4), check_raw_argmax=False)


def test_hand_made_traces_skip_what_they_do_not_record() -> None:
    trace = hand_trace([(10, " a"), (2, "</s>"), (11, " b")])  # no best_score, no EOS id in the settings
    assert_well_formed(trace)
    with caught(match=r"EOS \(id 2\) at step 1 is followed by 1 more tokens: ' b'"):
        assert_well_formed(trace, eos_token_id=2)


def test_a_processor_the_settings_do_not_record_breaks_the_raw_argmax(gpt2: Any, tokenizer: Any) -> None:
    # Negative control: a logits_processor adding noise re-ranks tokens; with its record in the settings removed
    # (a processor that reached generate() some other way), nothing in the trace explains the re-ranking.
    trace = record(gpt2, tokenizer, PROBES, max_new_tokens=6, logits_processor=noise_processor(2.0), seed=0)
    settings = {k: v for k, v in trace.settings.items() if k != "logits_processor"}
    unrecorded = dataclasses.replace(trace, settings=settings)
    with caught(match="greedy without ranking processors must choose the raw argmax") as info:
        assert_well_formed(unrecorded)
    assert "pass check_raw_argmax=False" in str(info.value)  # the message says what to do
    assert_well_formed(unrecorded, check_raw_argmax=False)  # the user says unrecorded processors are expected
