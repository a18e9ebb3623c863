"""Every decoding setting that differs from a default GenerationConfig is in the trace's identity: adding one after
recording makes the snapshot stale ("decoding settings changed: bad_words_ids ..."), never a regression of the
model; values are readable in the file; a trace recorded without them has the keys it always had."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest

from pytest_genguard import Verdict, VerifyFallbackWarning, assert_well_formed, compare, record, verify
from pytest_genguard.core.trace import GenerationTrace

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "__snapshots__"
EXAMPLE = EXAMPLES / "test_decoding" / "test_greedy_path.genguard"
PROMPTS = ["the quick", "once upon a"]


@pytest.fixture(scope="module")
def base(gpt2: Any, tokenizer: Any, one_thread: None) -> GenerationTrace:
    return record(gpt2, tokenizer, PROMPTS, max_new_tokens=6, top_k=5)


def _settings_for(base: GenerationTrace) -> dict[str, tuple[dict[str, Any], str]]:
    """Settings that change this path (the first token is banned, suppressed or pushed down), and how each reads in
    the stale reason (JSON text, quoted like any text setting)."""
    first = base.prompts[0].steps[0].token_id
    return {
        "bad_words_ids": ({"bad_words_ids": [[first]]}, "'" + f"[[{first}]]" + "'"),
        "suppress_tokens": ({"suppress_tokens": [first]}, f"'[{first}]'"),
        "sequence_bias": ({"sequence_bias": {(first,): -20.0}}, f"'[[[{first}], -20.0]]'"),
        "begin_suppress_tokens": ({"begin_suppress_tokens": [first]}, f"'[{first}]'"),
        "encoder_repetition_penalty": ({"encoder_repetition_penalty": 5.0}, "5.0"),
        "renormalize_logits": ({"renormalize_logits": True, "repetition_penalty": 3.0}, "True"),
    }


CASES = [
    "bad_words_ids",
    "suppress_tokens",
    "sequence_bias",
    "begin_suppress_tokens",
    "encoder_repetition_penalty",
    "renormalize_logits",
]


@pytest.mark.parametrize("name", CASES)
def test_a_setting_added_after_recording_makes_the_trace_stale_naming_it(
    base: GenerationTrace, gpt2: Any, tokenizer: Any, name: str
) -> None:
    kwargs, shown = _settings_for(base)[name]
    new = record(gpt2, tokenizer, PROMPTS, max_new_tokens=6, top_k=5, **kwargs)
    cmp = compare(base, new)
    assert cmp.verdict is Verdict.STALE, str(cmp)
    reason = next(r for r in cmp.stale_reasons if r.startswith("decoding settings changed: "))
    assert f"{name} (unset) -> {shown}" in reason
    assert str(cmp).splitlines()[0].startswith("stale:"), str(cmp)


def test_the_changed_settings_do_change_the_path(base: GenerationTrace, gpt2: Any, tokenizer: Any) -> None:
    """The cases above are settings that would otherwise read as a regression of the model."""
    kwargs, _ = _settings_for(base)["bad_words_ids"]
    new = record(gpt2, tokenizer, PROMPTS, max_new_tokens=6, top_k=5, **kwargs)
    assert new.prompts[0].token_ids != base.prompts[0].token_ids
    without_settings = GenerationTrace(
        prompts=new.prompts, settings=base.settings, model=new.model, tokenizer=new.tokenizer
    )
    assert compare(base, without_settings).verdict is Verdict.REGRESSION  # what users saw before


def test_values_are_readable_and_survive_the_file(gpt2: Any, tokenizer: Any) -> None:
    trace = record(
        gpt2,
        tokenizer,
        ["the quick"],
        max_new_tokens=4,
        top_k=3,
        bad_words_ids=[[5, 6]],
        sequence_bias={(7,): -1.5},
        stop_strings=["zz"],
        exponential_decay_length_penalty=(2, 1.1),
    )
    assert trace.settings["bad_words_ids"] == "[[5, 6]]"
    assert trace.settings["sequence_bias"] == "[[[7], -1.5]]"
    assert trace.settings["stop_strings"] == '["zz"]'
    assert trace.settings["exponential_decay_length_penalty"] == "[2, 1.1]"
    text = trace.to_json()
    assert '"bad_words_ids": "[[5, 6]]"' in text
    assert GenerationTrace.from_json(text).settings == trace.settings


def test_without_extra_settings_a_trace_has_the_keys_committed_snapshots_have(base: GenerationTrace) -> None:
    stored = json.loads(EXAMPLE.read_text(encoding="utf-8"))["settings"]
    assert set(base.settings) == set(stored)


def test_output_flags_token_ids_and_switched_off_flags_are_not_settings(
    gpt2: Any, tokenizer: Any, base: GenerationTrace
) -> None:
    from transformers import GenerationConfig

    config = GenerationConfig(output_attentions=True, output_hidden_states=True, pad_token_id=0, bos_token_id=1)
    trace = record(gpt2, tokenizer, PROMPTS, max_new_tokens=6, top_k=5, generation_config=config)
    assert set(trace.settings) == set(base.settings)
    # a flag set to False, an empty list: off, as unset is (5.x defaults to None where 4.57 said False)
    off = record(gpt2, tokenizer, PROMPTS, max_new_tokens=6, top_k=5, renormalize_logits=False, suppress_tokens=[])
    assert set(off.settings) == set(base.settings)


def test_verify_re_generates_a_trace_with_settings_teacher_forcing_does_not_apply(
    base: GenerationTrace, gpt2: Any, tokenizer: Any
) -> None:
    kwargs, _ = _settings_for(base)["bad_words_ids"]
    trace = record(gpt2, tokenizer, PROMPTS, max_new_tokens=6, top_k=5, **kwargs)
    with pytest.warns(VerifyFallbackWarning, match="does not re-apply the trace's settings bad_words_ids"):
        result = verify(gpt2, tokenizer, trace)
    assert result.verdict is Verdict.IDENTICAL, str(result)


def test_a_greedy_trace_with_suppressed_tokens_is_well_formed(base: GenerationTrace, gpt2: Any, tokenizer: Any) -> None:
    kwargs, _ = _settings_for(base)["suppress_tokens"]
    trace = record(gpt2, tokenizer, PROMPTS, max_new_tokens=6, top_k=5, **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert_well_formed(trace)
