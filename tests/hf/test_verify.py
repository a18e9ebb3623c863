"""verify(): teacher-forced re-checks of recorded traces: a just-recorded trace verifies within the fp32 defaults on
gpt2, llama and t5 (greedy, processors, seeded sampling); a changed model or a wrong processor setting is caught."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest
import torch

import pytest_genguard
from pytest_genguard import VerifyFallbackWarning
from pytest_genguard.core.events import to_json
from pytest_genguard.core.verdict import Verdict
from pytest_genguard.hf.teacher import teacher_force
from pytest_genguard.hf.verify import verify
from pytest_genguard.plugin.tally import EVENTS_KEY

PROMPTS = ["the quick brown", "a"]  # different lengths: the batch is left padded (right padded for t5)


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return pytest_genguard.tiny_tokenizer()


_MODELS: dict[str, Any] = {}


def _model(arch: str) -> Any:
    """One tiny model per arch for this module (verify() never changes weights; tests that do, copy first)."""
    if arch not in _MODELS:
        _MODELS[arch] = pytest_genguard.tiny_model(arch)
    return _MODELS[arch]


def _sampling_config(model: Any, **values: Any) -> Any:
    config = copy.deepcopy(model.generation_config)
    for key, value in values.items():
        setattr(config, key, value)
    return config


DECODINGS = {
    "greedy": {},
    "processors": {"repetition_penalty": 1.3, "no_repeat_ngram_size": 2, "min_new_tokens": 6},
    "sampling": {"do_sample": True, "temperature": 0.7, "top_p": 0.9, "sampling_top_k": 20},
}


@pytest.mark.parametrize(
    ("arch", "decoding"),
    [
        ("gpt2", "greedy"),
        ("llama", "greedy"),
        ("t5", "greedy"),
        ("gpt2", "processors"),
        ("t5", "processors"),  # processors see the decoder ids
        ("llama", "sampling"),
        ("t5", "sampling"),
    ],
)
def test_a_just_recorded_trace_verifies_within_the_fp32_defaults(arch: str, decoding: str, tokenizer: Any) -> None:
    model = _model(arch)
    kwargs = dict(DECODINGS[decoding])
    if "sampling_top_k" in kwargs:
        kwargs["generation_config"] = _sampling_config(model, top_k=kwargs.pop("sampling_top_k"))
    trace = pytest_genguard.record(model, tokenizer, PROMPTS, max_new_tokens=12, top_k=4, seed=3, **kwargs)
    result = verify(model, tokenizer, trace)
    assert result.ok, str(result)
    assert result.verdict in (Verdict.IDENTICAL, Verdict.WITHIN_TOLERANCE)
    assert result.stats.max_abs <= 5e-6
    steps = sum(len(p.steps) for p in trace)
    assert steps >= len(PROMPTS) * 3
    assert result.stats.compared >= steps * 6  # logprob, score and 4 top-k values per step
    assert result.environment_diff == () and result.fingerprint_diff == ()  # same weights, same tokenizer


def test_the_teacher_forced_trace_has_the_recorded_structure(tokenizer: Any) -> None:
    model = _model("llama")
    trace = pytest_genguard.record(model, tokenizer, PROMPTS, max_new_tokens=8, top_k=3)
    forced = teacher_force(model, tokenizer, trace)
    assert [p.token_ids for p in forced] == [p.token_ids for p in trace]
    assert [p.prompt_ids for p in forced] == [p.prompt_ids for p in trace]
    assert all(len(s.top_ids) == 3 for p in forced for s in p.steps)
    assert forced.model == trace.model and forced.settings == trace.settings


def _perturbed(model: Any) -> Any:
    changed = copy.deepcopy(model)
    weight = dict(changed.named_parameters())["model.layers.0.mlp.down_proj.weight"]
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        weight.add_(torch.randn(weight.shape, generator=generator) * 0.5)
    return changed


def test_a_perturbed_model_is_a_regression_that_names_the_step_where_it_prefers_another_token(tokenizer: Any) -> None:
    model = _model("llama")
    trace = pytest_genguard.record(model, tokenizer, PROMPTS, max_new_tokens=12, top_k=4)
    result = verify(model=_perturbed(model), tokenizer=tokenizer, trace=trace)
    assert result.verdict is Verdict.REGRESSION
    changed = {name for name, _, _ in result.fingerprint_diff}
    assert "model.weights_hash" in changed and "model.config_hash" not in changed
    assert not any(name.startswith("model.") for name, _, _ in result.environment_diff)  # one meaning per field
    assert "model.weights_hash" in result.render()  # still listed under "environment differs"
    assert result.preferences, "greedy paths of a perturbed model change somewhere"
    first = result.preferences[0]
    recorded = trace.prompts[first.prompt_index].steps[first.step]
    assert first.recorded_id == recorded.token_id and first.preferred_id != recorded.token_id
    assert first.preferred_logprob > first.recorded_logprob_now  # the model now prefers it
    text = str(result)
    assert text.splitlines()[0].startswith("regression: ")
    assert f"prompt {first.prompt_index} step {first.step}: the model now prefers" in text.splitlines()[1]
    assert "model.weights_hash: " in text


def test_under_the_snapshot_rule_a_perturbed_model_is_stale_with_the_regression_for_information(
    tokenizer: Any,
) -> None:
    model = _model("gpt2")
    trace = pytest_genguard.record(model, tokenizer, PROMPTS, max_new_tokens=8, top_k=4)
    changed = copy.deepcopy(model)
    with torch.no_grad():
        changed.transformer.h[0].mlp.c_proj.weight.mul_(3.0)
    result = verify(changed, tokenizer, trace, check_fingerprints=True)
    assert result.verdict is Verdict.STALE
    assert result.stale_reasons[0].startswith("model changed: weights ")
    assert any(not d.tolerated for d in result.divergences)  # the values regressed too: told, not the verdict
    assert "(regression)" in str(result)


def test_a_wrong_repetition_penalty_setting_is_caught(tokenizer: Any) -> None:
    model = _model("gpt2")
    trace = pytest_genguard.record(model, tokenizer, PROMPTS, max_new_tokens=16, top_k=4)
    ids = trace.prompts[0].prompt_ids + trace.prompts[0].token_ids
    assert len(set(ids)) < len(ids), "precondition: the unpenalized greedy path repeats a token"
    assert verify(model, tokenizer, trace).ok
    claimed = dataclasses.replace(trace, settings={**trace.settings, "repetition_penalty": 5.0})
    result = verify(model, tokenizer, claimed)
    assert result.verdict is Verdict.REGRESSION
    assert any(d.kind in ("token", "logprob") for d in result.divergences)


def test_a_wrong_temperature_setting_is_caught_on_a_sampled_trace(tokenizer: Any) -> None:
    model = _model("t5")
    trace = pytest_genguard.record(
        model, tokenizer, PROMPTS, max_new_tokens=8, top_k=4, seed=1, do_sample=True, temperature=0.5
    )
    assert verify(model, tokenizer, trace).ok
    claimed = dataclasses.replace(trace, settings={**trace.settings, "temperature": None})
    result = verify(model, tokenizer, claimed)
    assert result.verdict is Verdict.REGRESSION
    assert result.divergences[0].step == 0 and "score" in result.divergences[0].detail
    assert result.preferences == ()  # sampled tokens are kept: no "now prefers" for sampling


def test_beam_search_falls_back_to_regeneration_and_says_so(tokenizer: Any) -> None:
    model = _model("gpt2")
    trace = pytest_genguard.record(model, tokenizer, PROMPTS, max_new_tokens=6, top_k=3, num_beams=2)
    assert trace.settings["mode"] == "beam"
    with pytest.warns(VerifyFallbackWarning, match="beam-search traces cannot be teacher forced"):
        result = verify(model, tokenizer, trace)
    assert result.ok and result.regenerated
    assert "verified by re-generation" in str(result).splitlines()[1]


def test_verify_rejects_what_is_not_a_trace(tokenizer: Any) -> None:
    model = _model("gpt2")
    with pytest.raises(TypeError, match=r"verify\(\): trace must be a GenerationTrace .* got dict"):
        verify(model, tokenizer, {"prompts": []})  # type: ignore[arg-type]


def test_verify_runs_in_eval_mode_restores_training_mode_and_emits_a_verify_event(
    tokenizer: Any, request: pytest.FixtureRequest
) -> None:
    model = pytest_genguard.tiny_model("gpt2")  # dropout 0.1: train mode would randomize the logits
    trace = pytest_genguard.record(model, tokenizer, PROMPTS, max_new_tokens=4, top_k=3)
    model.train()
    assert verify(model, tokenizer, trace, atol=1e-5).ok
    assert model.training
    events = [to_json(e) for e in request.node.stash[EVENTS_KEY] if e.kind == "verify"]
    assert len(events) == 1
    assert events[0]["failure"] is False and events[0]["verdict"] in ("identical", "within tolerance")
    assert "atol 1e-05" in events[0]["summary"] or events[0]["verdict"] == "identical"


def test_pytest_genguard_verify_stays_the_function_after_its_module_is_imported() -> None:
    import importlib

    importlib.import_module("pytest_genguard.hf.verify")  # the import system sets the package attribute to the module
    importlib.import_module("pytest_genguard.core.compare")
    assert pytest_genguard.verify is verify
    assert callable(pytest_genguard.compare) and pytest_genguard.compare.__name__ == "compare"
