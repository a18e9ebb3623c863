"""assert_deterministic: repeated runs are bitwise identical; hidden randomness is counted and shown."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
import torch
from invariant_support import PROBES, broken, caught, dropout_in_eval, noise_processor
from transformers import LogitsProcessor, LogitsProcessorList

from pytest_genguard import assert_deterministic
from pytest_genguard.hf.tiny import tiny_model, tiny_tokenizer


@pytest.fixture(scope="module")
def tuned(genguard_finetune: Callable[..., Any]) -> Any:
    return genguard_finetune("gpt2")


def test_greedy_and_seeded_sampling_repeat_bitwise(tuned: Any) -> None:
    assert_deterministic(tuned.model, tuned.tokenizer, PROBES, runs=3, max_new_tokens=8)
    assert_deterministic(tuned.model, tuned.tokenizer, PROBES, runs=3, max_new_tokens=8, do_sample=True, seed=5)


def test_beam_search_that_samples_runs_under_the_seed_too() -> None:
    # An untrained model: its flat distributions make every seed sample differently, so an unseeded run would differ.
    model, tokenizer = tiny_model("gpt2"), tiny_tokenizer()
    assert_deterministic(model, tokenizer, PROBES[:2], runs=2, max_new_tokens=6, seed=5, num_beams=2, do_sample=True)


def test_dropout_left_on_at_inference_is_caught_and_counted(tuned: Any) -> None:
    # Negative control: dropout that ignores model.eval() (record() puts the model in eval mode; this stays on).
    with broken(tuned.model, dropout_in_eval) as model, caught() as info:
        assert_deterministic(model, tuned.tokenizer, PROBES, runs=3, max_new_tokens=8)
    lines = str(info.value).splitlines()
    assert lines[0].startswith("assert_deterministic: 3 unique outputs in 3 runs (")
    assert "greedy, each run from a different RNG state; bitwise)" in lines[0]
    assert "  (expected = run 0, actual = run 1)" in lines
    assert any(line.startswith("  regression: prompt 0 'the quick'") and "step 0" in line for line in lines)
    assert "dropout that ignores model.eval()" in lines[-1]


def test_a_sampler_hidden_in_a_greedy_path_is_caught(tuned: Any) -> None:
    # Negative control: a logits processor that draws noise from the global RNG makes "greedy" a sampler.
    with caught(match=r"assert_deterministic: [23] unique outputs in 3 runs"):
        assert_deterministic(
            tuned.model, tuned.tokenizer, PROBES[:2], runs=3, max_new_tokens=6, logits_processor=noise_processor(0.5)
        )


class PythonRandomBias(LogitsProcessor):
    """Randomness outside torch: a processor that biases a token chosen with Python's `random` module."""

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        biased = scores.clone()
        biased[:, random.randrange(scores.shape[-1])] += 50.0
        return biased  # type: ignore[return-value]


def test_randomness_outside_torch_is_caught_even_under_a_sampling_seed(tuned: Any) -> None:
    # Negative control: the sampling seed fixes torch's RNG only; Python's `random` differs between runs.
    processors = LogitsProcessorList([PythonRandomBias()])
    with caught(match=r"unique outputs in 3 runs .*sample, each run under the same seed"):
        assert_deterministic(
            tuned.model,
            tuned.tokenizer,
            PROBES[:2],
            runs=3,
            max_new_tokens=4,
            do_sample=True,
            logits_processor=processors,
        )


def test_the_callers_random_states_are_restored(tuned: Any) -> None:
    import numpy

    random.seed(123)
    torch.manual_seed(123)
    numpy.random.seed(123)
    before = (random.getstate(), torch.get_rng_state(), numpy.random.get_state()[1].copy())
    assert_deterministic(tuned.model, tuned.tokenizer, PROBES[:1], runs=2, max_new_tokens=3)
    assert random.getstate() == before[0]
    assert torch.equal(torch.get_rng_state(), before[1])
    assert (numpy.random.get_state()[1] == before[2]).all()


def test_fewer_than_two_runs_is_an_error(tuned: Any) -> None:
    with pytest.raises(ValueError, match="runs must be >= 2"):
        assert_deterministic(tuned.model, tuned.tokenizer, PROBES, runs=1)
