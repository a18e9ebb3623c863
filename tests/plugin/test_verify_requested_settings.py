"""`genguard_snapshot.verify()`'s staleness check reads what the call asks for off one generation config, built once
(it built the config twice: once for the settings outside record()'s known keys, once for the known ones), and still
sees every changed argument."""

from __future__ import annotations

from typing import Any

import pytest
from transformers import GenerationConfig

import pytest_genguard as gg
from pytest_genguard.plugin.subjects import Recording

PROMPTS = ["the quick brown"]


@pytest.fixture(scope="module")
def recorded() -> tuple[Any, Any, gg.GenerationTrace]:
    model, tokenizer = gg.tiny_model("gpt2"), gg.tiny_tokenizer()
    trace = gg.record(model, tokenizer, PROMPTS, max_new_tokens=4, top_k=5, repetition_penalty=1.2, epsilon_cutoff=0)
    return model, tokenizer, trace


def _recording(**generate_kwargs: Any) -> Recording:
    return Recording(PROMPTS, 4, 5, None, generate_kwargs)


def test_the_requested_settings_come_from_one_generation_config(
    recorded: tuple[Any, Any, gg.GenerationTrace], monkeypatch: pytest.MonkeyPatch
) -> None:
    model, tokenizer, trace = recorded
    builds: list[dict[str, Any]] = []
    update = GenerationConfig.update

    def counting(self: GenerationConfig, **kwargs: Any) -> Any:
        builds.append(kwargs)
        return update(self, **kwargs)

    monkeypatch.setattr(GenerationConfig, "update", counting)
    requested = _recording(repetition_penalty=1.2, epsilon_cutoff=0).requested(trace, model, tokenizer)
    assert len(builds) == 1, f"the generation config was built {len(builds)} times"
    assert requested.settings == trace.settings  # the same arguments: nothing changed


@pytest.mark.parametrize(
    ("kwargs", "changed"),
    [
        ({"repetition_penalty": 1.3, "epsilon_cutoff": 0}, "repetition_penalty"),  # a known setting
        ({"repetition_penalty": 1.2, "epsilon_cutoff": 3e-4}, "epsilon_cutoff"),  # one outside the known keys
    ],
    ids=["known", "other"],
)
def test_a_changed_argument_is_still_seen(
    recorded: tuple[Any, Any, gg.GenerationTrace], kwargs: dict[str, Any], changed: str
) -> None:
    # Negative controls: each kind of setting, changed, makes the requested settings differ from the stored ones.
    model, tokenizer, trace = recorded
    requested = _recording(**kwargs).requested(trace, model, tokenizer)
    assert {
        k for k in {*requested.settings, *trace.settings} if requested.settings.get(k) != trace.settings.get(k)
    } == {changed}
