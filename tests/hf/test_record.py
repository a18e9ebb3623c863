"""record() on every tiny architecture and decoding mode: shapes, consistency, state restored."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from pytest_genguard.core.trace import GenerationTrace
from pytest_genguard.hf.record import record
from pytest_genguard.hf.tiny import tiny_model

PROMPTS = ["the quick", "once upon a time there was"]
MODES: dict[str, dict[str, Any]] = {
    "greedy": {},
    "sample": {"do_sample": True, "seed": 7},
    "beam": {"num_beams": 3},
}


@pytest.fixture(scope="module", params=["gpt2", "llama", "t5"])
def model(request: pytest.FixtureRequest) -> Any:
    return tiny_model(request.param)


@pytest.mark.parametrize("mode", sorted(MODES))
def test_record_captures_a_consistent_path_for_every_arch_and_mode(model: Any, tokenizer: Any, mode: str) -> None:
    trace = record(model, tokenizer, PROMPTS, max_new_tokens=6, top_k=4, **MODES[mode])
    assert trace.settings["mode"] == mode
    assert [p.prompt for p in trace] == PROMPTS
    for p in trace:
        assert p.prompt_ids == tuple(tokenizer(p.prompt)["input_ids"])
        assert 1 <= len(p.steps) <= 6
        assert p.finish_reason in ("eos", "length")
        for step in p.steps:
            assert len(step.top_ids) == len(step.top_logprobs) == 4
            assert list(step.top_logprobs) == sorted(step.top_logprobs, reverse=True)
            assert all(lp <= 0 for lp in step.top_logprobs)
            assert step.margin == pytest.approx(step.top_logprobs[0] - step.top_logprobs[1], abs=1e-6)
            rank = step.rank_of(step.token_id)
            if rank is not None:
                assert step.logprob == pytest.approx(step.top_logprobs[rank], abs=1e-6)
            if mode == "greedy":
                assert step.token_id == step.top_ids[0]
                assert step.best_score is None  # the chosen token had the best processed score


def test_greedy_chosen_token_is_the_argmax_of_the_processed_scores(tokenizer: Any) -> None:
    model = tiny_model("gpt2")
    trace = record(model, tokenizer, PROMPTS, max_new_tokens=5, repetition_penalty=1.5)
    for p in trace:
        for step in p.steps:
            assert step.best_score is None  # not stored: it equals the chosen token's processed score


def test_generated_ids_decode_back_to_the_token_strings(tokenizer: Any) -> None:
    model = tiny_model("llama", seed=3)
    trace = record(model, tokenizer, ["café au lait 🙂", "the quick"], max_new_tokens=10)
    for p in trace:
        joined = b"".join(s.token_bytes for s in p.steps)
        assert joined.decode("utf-8", "replace") == tokenizer.decode(list(p.token_ids))


def test_record_restores_training_mode_and_padding_side(tokenizer: Any) -> None:
    model = tiny_model("gpt2")
    model.train()
    tokenizer.padding_side = "right"
    record(model, tokenizer, PROMPTS, max_new_tokens=2)
    assert model.training
    assert tokenizer.padding_side == "right"
    tokenizer.padding_side = "left"


def test_record_does_not_mutate_the_models_generation_config(tokenizer: Any) -> None:
    model = tiny_model("gpt2")
    before = model.generation_config.to_dict()
    record(model, tokenizer, PROMPTS, max_new_tokens=3, do_sample=True, temperature=0.7, seed=1)
    assert model.generation_config.to_dict() == before


def test_seeded_sampling_is_reproducible_and_leaves_the_callers_rng_alone(tokenizer: Any) -> None:
    model = tiny_model("gpt2")
    torch.manual_seed(123)
    state = torch.get_rng_state()
    a = record(model, tokenizer, PROMPTS, max_new_tokens=8, do_sample=True, seed=5)
    assert torch.equal(torch.get_rng_state(), state)
    b = record(model, tokenizer, PROMPTS, max_new_tokens=8, do_sample=True, seed=5)
    assert a == b
    c = record(model, tokenizer, PROMPTS, max_new_tokens=8, do_sample=True, seed=6)
    assert [p.token_ids for p in c] != [p.token_ids for p in a]


def test_a_batched_prompt_records_the_same_path_as_alone(tokenizer: Any) -> None:
    model = tiny_model("llama")
    batched = record(model, tokenizer, PROMPTS, max_new_tokens=6)
    alone = record(model, tokenizer, PROMPTS[:1], max_new_tokens=6)
    assert batched[0].token_ids == alone[0].token_ids


def test_the_trace_carries_settings_fingerprints_and_environment(tokenizer: Any) -> None:
    model = tiny_model("gpt2")
    trace = record(model, tokenizer, "the quick", max_new_tokens=2, top_k=3)
    assert trace.settings["max_new_tokens"] == 2
    assert trace.settings["record_top_k"] == 3
    assert trace.model is not None and trace.model.model_type == "gpt2"
    assert len(trace.model.weights_hash) == 64
    assert trace.tokenizer is not None and trace.tokenizer.vocab_size == len(tokenizer)
    env = trace.environment
    for key in ("python", "torch", "transformers", "device", "dtype", "attn_implementation", "num_threads"):
        assert key in env, key
    assert env["device"] == "cpu"
    assert env["dtype"] == "float32"


def test_a_trace_survives_its_json_round_trip_exactly(tokenizer: Any) -> None:
    model = tiny_model("t5")
    trace = record(model, tokenizer, PROMPTS, max_new_tokens=4)
    again = GenerationTrace.from_json(trace.to_json())
    assert again == trace
    assert again.to_json() == trace.to_json()


def test_the_same_weights_give_the_same_fingerprint_and_other_weights_another(tokenizer: Any) -> None:
    a = record(tiny_model("gpt2", seed=0), tokenizer, "x", max_new_tokens=1)
    b = record(tiny_model("gpt2", seed=0), tokenizer, "x", max_new_tokens=1)
    c = record(tiny_model("gpt2", seed=1), tokenizer, "x", max_new_tokens=1)
    assert a.model == b.model
    assert a.model is not None and c.model is not None
    assert a.model.weights_hash != c.model.weights_hash
    assert a.model.config_hash == c.model.config_hash


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"prompts": []}, "prompts is empty"),
        ({"top_k": 0}, "top_k must be an integer >= 1, got 0"),
        ({"max_new_tokens": 0}, "max_new_tokens must be an integer >= 1, got 0"),
        ({"num_return_sequences": 2, "num_beams": 2}, "num_return_sequences must be 1"),
    ],
)
def test_bad_arguments_get_a_clear_error(tokenizer: Any, kwargs: dict[str, Any], message: str) -> None:
    model = tiny_model("gpt2")
    args: dict[str, Any] = {"prompts": ["a"], "max_new_tokens": 2, **kwargs}
    prompts = args.pop("prompts")
    with pytest.raises(ValueError, match=message):
        record(model, tokenizer, prompts, **args)


def test_logprobs_are_float32_values(tokenizer: Any) -> None:
    trace = record(tiny_model("gpt2"), tokenizer, "the", max_new_tokens=3)
    import struct

    for step in trace[0].steps:
        for value in (step.logprob, *step.top_logprobs):
            assert math.isfinite(value)
            assert struct.unpack("<f", struct.pack("<f", value))[0] == value
