"""GenerationRecorder's probes are any prompt record() takes: a conversation (encoded with the tokenizer's chat
template) and token ids record, keep their form in the history (its JSON included) and give record()'s trace; a
malformed probe is refused when the recorder is made, naming it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from chat_support import CONVERSATION, chat_tokenizer
from recorder_support import trainer

from pytest_genguard.core.compare import compare
from pytest_genguard.core.history import RecorderHistory
from pytest_genguard.core.verdict import Verdict
from pytest_genguard.hf.record import record
from pytest_genguard.hf.recorder import GenerationRecorder
from pytest_genguard.hf.tiny import tiny_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")  # (tests/hf/conftest.py)

IDS = [5, 6, 7, 8]
PROBES: list[Any] = [CONVERSATION, IDS, "the quick brown"]
NEW_TOKENS = 4


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[GenerationRecorder, Any, Any]:
    """A tiny gpt2 Trainer run with a conversation probe, a token-id probe and a text probe, recorded every 3 steps
    and at evaluate() (with 2 evaluated examples beside the probes: the other way of generating)."""
    tokenizer = chat_tokenizer(adds_bos=False)
    recorder = GenerationRecorder(
        PROBES,
        every_n_steps=3,
        eval_examples=2,
        max_new_tokens=NEW_TOKENS,
        chat_template_kwargs={"enable_thinking": False},
    )
    run = trainer(tmp_path_factory.mktemp("forms"), "gpt2", callbacks=[recorder], tokenizer=tokenizer)
    run.train()
    run.evaluate()
    return recorder, run, tokenizer


def test_conversation_and_token_id_probes_are_recorded_in_their_forms(trained: Any) -> None:
    recorder, _, tokenizer = trained
    assert [c.event for c in recorder.history] == ["step", "step", "evaluate"]
    encoded = tokenizer.apply_chat_template(
        CONVERSATION, tokenize=True, return_dict=False, add_generation_prompt=True, enable_thinking=False
    )
    for checkpoint in recorder.history:
        chat, ids, text = checkpoint.trace.prompts[:3]
        assert chat.messages == tuple(CONVERSATION) and list(chat.prompt_ids) == list(encoded)
        assert chat.prompt.endswith("<|assistant|>\n<think></think>\n")  # the template's kwargs reached it
        assert ids.from_ids and list(ids.prompt_ids) == IDS and ids.messages is None
        assert text.prompt == "the quick brown" and not text.from_ids and text.messages is None
        assert '"enable_thinking": false' in str(checkpoint.trace.settings["chat_template_kwargs"])
    assert len(recorder.history[-1].trace.prompts) == 3 + 2  # the probes, then the evaluated examples
    assert not recorder.history[-1].trace.prompts[3].from_ids  # examples are stored as their text, as before


def test_the_last_probe_recording_is_what_record_gives_for_the_same_prompts(trained: Any) -> None:
    recorder, run, tokenizer = trained
    last = recorder.history[1]  # step 6, the last training step: the weights the Trainer ends with
    assert last.step == 6
    again = record(
        run.model,
        tokenizer,
        PROBES,
        max_new_tokens=NEW_TOKENS,
        chat_template_kwargs={"enable_thinking": False},
    )
    result = compare(last.trace, again, check_fingerprints=False)
    assert result.verdict is Verdict.IDENTICAL, result.render()
    assert [p.messages for p in again.prompts] == [p.messages for p in last.trace.prompts]


def test_the_history_of_such_probes_round_trips_through_its_json(trained: Any) -> None:
    recorder, _, _ = trained
    text = recorder.history.to_json()
    assert '"role": "system"' in text and '"from_ids": true' in text
    assert RecorderHistory.from_json(text) == recorder.history


@pytest.mark.parametrize(
    ("probes", "message"),
    [
        (
            ["the cat", 2.5],
            r"GenerationRecorder\(\): prompt 1 is float 2\.5; a prompt is a string, a list of token ids",
        ),
        ([[{"role": "user", "content": "a"}, {"content": "b"}]], r"GenerationRecorder\(\): prompt 0, message 1 has no"),
        ([[1, "two"]], r"GenerationRecorder\(\): prompt 0 is list \[1, 'two'\]"),
    ],
    ids=["a number", "a message without a role", "ids with a string"],
)
def test_a_malformed_probe_is_refused_when_the_recorder_is_made(probes: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        GenerationRecorder(probes)


def test_chat_template_kwargs_without_a_conversation_probe_are_refused() -> None:
    with pytest.raises(ValueError, match=r"GenerationRecorder\(\): chat_template_kwargs is for conversations"):
        GenerationRecorder(["the cat"], chat_template_kwargs={"enable_thinking": False})


def test_a_conversation_probe_without_a_chat_template_fails_before_the_first_step(tmp_path: Path) -> None:
    recorder = GenerationRecorder([CONVERSATION], every_n_steps=1, max_new_tokens=2)
    run = trainer(tmp_path, "gpt2", callbacks=[recorder], tokenizer=tiny_tokenizer())
    with pytest.raises(ValueError, match="prompt 0 is a conversation, but the tokenizer has no chat template"):
        run.train()
    assert run.state.global_step == 0 and not recorder.history
