"""verify() agrees with re-generation for any prompt and decoding config: a just-recorded trace verifies within the
fp32 tolerances for every logits processor verify() re-applies (all steps at once), greedy or sampled. Run on
transformers 4.57 as well as 5.x: each version's verify() is checked against its own generate()."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st
from transformers import GenerationConfig

from pytest_genguard import strategies
from pytest_genguard.core.verdict import Verdict
from pytest_genguard.hf.record import record
from pytest_genguard.hf.tiny import tiny_model
from pytest_genguard.hf.verify import verify

GENGUARD = settings.get_profile(strategies.PROFILE)


@pytest.fixture(scope="module")
def tuned(genguard_finetune: Callable[..., Any]) -> Any:
    """Sharp greedy answers: an untrained model's near ties would only test the tie rule."""
    return genguard_finetune("gpt2")


@pytest.fixture(scope="module")
def untrained() -> Any:
    """Flat distributions keep many tokens above the top-p/min-p/typical cut-offs: the warpers have work."""
    return tiny_model("llama")


def prompt_lists(tokenizer: Any) -> st.SearchStrategy[list[str]]:
    return st.lists(strategies.prompts(tokenizer, max_words=4), min_size=1, max_size=2)


def _assert_verifies(model: Any, tokenizer: Any, trace: Any) -> None:
    result = verify(model, tokenizer, trace)
    assert result.ok, str(result)
    assert result.verdict in (Verdict.IDENTICAL, Verdict.WITHIN_TOLERANCE, Verdict.TOLERATED)
    assert result.stats.compared > 0 and result.stats.exceeded == 0  # every value within the fp32 rule
    if result.verdict is Verdict.TOLERATED:  # a greedy step on a near tie: told as a preference, never hidden
        assert result.preferences


@settings(GENGUARD, max_examples=25)
@given(data=st.data())
def test_any_greedy_or_sampled_config_verifies_against_its_own_generation(
    tuned: Any, tokenizer: Any, data: st.DataObject
) -> None:
    prompts = data.draw(prompt_lists(tokenizer), label="prompts")
    config = data.draw(strategies.generation_configs(max_new_tokens=16, modes=("greedy", "sample")), label="config")
    trace = record(tuned.model, tuned.tokenizer, prompts, top_k=4, **config)
    _assert_verifies(tuned.model, tuned.tokenizer, trace)


@st.composite
def warper_configs(draw: st.DrawFn) -> dict[str, Any]:
    """Sampling with every warper verify() re-applies, and the processors before them."""
    config = GenerationConfig(
        do_sample=True,
        temperature=draw(st.sampled_from((0.6, 1.0, 1.4))),
        top_k=draw(st.sampled_from((0, 3, 40))),
        top_p=draw(st.sampled_from((0.7, 1.0))),
        min_p=draw(st.sampled_from((None, 0.02, 0.2))),
        typical_p=draw(st.sampled_from((0.5, 0.9, 1.0))),
    )
    kwargs: dict[str, Any] = {"generation_config": config, "seed": draw(st.integers(0, 2**16))}
    if draw(st.booleans()):
        kwargs["repetition_penalty"] = draw(st.sampled_from((0.9, 1.3)))
    if draw(st.booleans()):
        kwargs["no_repeat_ngram_size"] = draw(st.integers(1, 3))
    if draw(st.booleans()):
        kwargs["min_new_tokens"] = draw(st.integers(1, 12))
    return kwargs


@settings(GENGUARD, max_examples=25)
@given(data=st.data(), config=warper_configs())
def test_any_warper_and_processor_combination_verifies(
    untrained: Any, tokenizer: Any, data: st.DataObject, config: dict[str, Any]
) -> None:
    prompts = data.draw(prompt_lists(tokenizer), label="prompts")
    trace = record(untrained, tokenizer, prompts, max_new_tokens=12, top_k=4, **config)
    _assert_verifies(untrained, tokenizer, trace)
