"""Property tests with `pytest_genguard.strategies`: for any prompt and decoding config the trace is well formed, the
processor contracts hold and greedy decoding is deterministic. Small on purpose (a model runs per example)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from pytest_genguard import assert_deterministic, assert_processor_contract, assert_well_formed, strategies
from pytest_genguard.hf.record import record
from pytest_genguard.hf.tiny import tiny_model

GENGUARD = settings.get_profile(strategies.PROFILE)


@pytest.fixture(scope="module")
def untrained() -> Any:
    """Well-formedness and processor contracts do not need a trained model; loops give the processors work."""
    return tiny_model("gpt2")


@pytest.fixture(scope="module")
def tuned(genguard_finetune: Callable[..., Any]) -> Any:
    """Determinism of an untrained model is near-tie noise; a fine-tuned one has sharp answers."""
    return genguard_finetune("gpt2")


def prompt_lists(tokenizer: Any) -> st.SearchStrategy[list[str]]:
    return st.lists(strategies.prompts(tokenizer, max_words=4), min_size=1, max_size=2)


@settings(GENGUARD, max_examples=15)
@given(data=st.data())
def test_any_prompt_and_config_gives_a_well_formed_trace(untrained: Any, tokenizer: Any, data: st.DataObject) -> None:
    prompts = data.draw(prompt_lists(tokenizer), label="prompts")
    config = data.draw(strategies.generation_configs(max_new_tokens=8), label="config")
    trace = record(untrained, tokenizer, prompts, top_k=3, **config)
    assert [p.prompt for p in trace] == prompts
    assert_well_formed(trace)


@settings(GENGUARD, max_examples=10)
@given(data=st.data(), n=st.integers(1, 3), penalty=st.sampled_from((1.2, 2.0)))
def test_processor_contracts_hold_for_any_prompt(
    untrained: Any, tokenizer: Any, data: st.DataObject, n: int, penalty: float
) -> None:
    prompts = data.draw(prompt_lists(tokenizer), label="prompts")
    assert_processor_contract(
        untrained, tokenizer, prompts, max_new_tokens=6, no_repeat_ngram_size=n, repetition_penalty=penalty
    )


@settings(GENGUARD, max_examples=10)
@given(data=st.data())
def test_greedy_decoding_is_deterministic_for_any_prompt(tuned: Any, data: st.DataObject) -> None:
    prompts = data.draw(prompt_lists(tuned.tokenizer), label="prompts")
    assert_deterministic(tuned.model, tuned.tokenizer, prompts, runs=2, max_new_tokens=6)


@settings(GENGUARD, max_examples=30)
@given(data=st.data())
def test_strategies_draw_what_they_promise(tokenizer: Any, data: st.DataObject) -> None:
    prompt = data.draw(strategies.prompts(tokenizer, min_words=2, max_words=3, max_tokens=12))
    assert 1 <= len(tokenizer(prompt)["input_ids"]) <= 12
    config = data.draw(strategies.generation_configs(max_new_tokens=5, modes=("sample", "beam")))
    assert 1 <= config["max_new_tokens"] <= 5
    if "generation_config" in config:
        assert config["generation_config"].do_sample and isinstance(config["seed"], int)
        config["generation_config"].validate(strict=True)
    else:
        assert config["num_beams"] in (2, 3)


def test_the_genguard_profile_suits_model_tests() -> None:
    assert GENGUARD.deadline is None
    assert GENGUARD.max_examples == 20
    assert HealthCheck.too_slow in GENGUARD.suppress_health_check
    assert GENGUARD.derandomize is bool(os.environ.get("CI"))
    before = settings.get_current_profile_name()
    try:
        strategies.load_profile()
        assert settings.get_current_profile_name() == "genguard"
    finally:
        settings.load_profile(before)


@pytest.mark.parametrize("ci", ["", "true"])
def test_the_profile_is_derandomized_on_ci(ci: str) -> None:
    env = {**os.environ, "CI": ci}
    code = (
        "from hypothesis import settings; import pytest_genguard.strategies; "
        "print(settings.get_profile('genguard').derandomize)"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(bool(ci))


def test_bad_strategy_arguments_are_rejected(tokenizer: Any) -> None:
    with pytest.raises(ValueError, match="need 1 <= min_words <= max_words"):
        strategies.prompts(tokenizer, min_words=3, max_words=2)
    with pytest.raises(ValueError, match="modes must be some of"):
        strategies.generation_configs(modes=("nucleus",))
