"""Prompts as conversations and as token ids (issue 32): a conversation is encoded as apply_chat_template(tokenize=True)
encodes it (one BOS with a template that writes it), its template arguments are settings, the trace keeps the
messages, and verify() of such a trace holds."""

from __future__ import annotations

import json
from typing import Any

import pytest
from chat_support import CONVERSATION, chat_tokenizer

from pytest_genguard import GenerationTrace, compare, verify
from pytest_genguard.core.verdict import Verdict
from pytest_genguard.hf.record import record


@pytest.fixture(scope="module")
def chat() -> Any:
    return chat_tokenizer()


def test_a_conversation_is_encoded_as_apply_chat_template_encodes_it(gpt2: Any, chat: Any, one_thread: None) -> None:
    expected = chat.apply_chat_template(CONVERSATION, tokenize=True, return_dict=False, add_generation_prompt=True)
    trace = record(gpt2, chat, [CONVERSATION], max_new_tokens=3)
    assert list(trace[0].prompt_ids) == list(expected)
    assert trace[0].prompt_ids[:2] != (chat.bos_token_id, chat.bos_token_id)  # one BOS: the template's
    assert trace[0].prompt_ids.count(chat.bos_token_id) == 1
    # Negative control: rendering to text and tokenizing that (what users did before) doubles the BOS.
    rendered = chat.apply_chat_template(CONVERSATION, tokenize=False, add_generation_prompt=True)
    assert chat(rendered)["input_ids"][:2] == [chat.bos_token_id, chat.bos_token_id]
    assert trace[0].prompt == rendered
    assert trace[0].messages == tuple(CONVERSATION)


def test_one_conversation_and_a_batch_of_mixed_forms_are_prompts(gpt2: Any, chat: Any, one_thread: None) -> None:
    ids = [chat.bos_token_id, *chat("once upon a")["input_ids"][1:]]
    trace = record(gpt2, chat, [CONVERSATION, ids, "the train"], max_new_tokens=2)
    assert [p.messages is not None for p in trace] == [True, False, False]
    assert [p.from_ids for p in trace] == [False, True, False]
    assert list(trace[1].prompt_ids) == ids
    single = record(gpt2, chat, CONVERSATION, max_new_tokens=2)  # one conversation is one prompt
    assert len(single) == 1 and single[0].prompt_ids == trace[0].prompt_ids
    assert compare(single, record(gpt2, chat, [CONVERSATION], max_new_tokens=2)).verdict is Verdict.IDENTICAL


def test_the_template_arguments_are_recorded_in_the_settings(gpt2: Any, chat: Any, one_thread: None) -> None:
    tools = [{"name": "lookup", "parameters": {}}]
    trace = record(
        gpt2, chat, [CONVERSATION], max_new_tokens=2, chat_template_kwargs={"enable_thinking": False, "tools": tools}
    )
    kwargs = json.loads(str(trace.settings["chat_template_kwargs"]))
    assert kwargs == {"add_generation_prompt": True, "enable_thinking": False, "tools": tools}
    assert "<think></think>" in trace[0].prompt and "<|tools|>" in trace[0].prompt
    plain = record(gpt2, chat, [CONVERSATION], max_new_tokens=2)
    assert json.loads(str(plain.settings["chat_template_kwargs"])) == {"add_generation_prompt": True}
    result = compare(plain, trace)
    assert result.verdict is Verdict.STALE and "chat_template_kwargs" in result.render()
    text_only = record(gpt2, chat, ["the quick"], max_new_tokens=2)
    assert "chat_template_kwargs" not in text_only.settings  # traces of text prompts read as before


def test_a_trace_of_conversations_round_trips_and_verifies(gpt2: Any, chat: Any, one_thread: None) -> None:
    trace = record(gpt2, chat, [CONVERSATION, [5, 6, 7]], max_new_tokens=4)
    again = GenerationTrace.from_json(trace.to_json())
    assert again == trace and again[0].messages == tuple(CONVERSATION) and again[1].from_ids
    assert '"role": "system"' in trace.to_json()
    result = verify(gpt2, chat, again)
    assert result.verdict.ok, result.render()


def test_a_conversation_needs_a_chat_template(gpt2: Any, tokenizer: Any) -> None:
    with pytest.raises(ValueError, match="prompt 0 is a conversation, but the tokenizer has no chat template"):
        record(gpt2, tokenizer, [CONVERSATION], max_new_tokens=2)


def test_a_prompt_of_another_shape_is_refused_naming_it(gpt2: Any, chat: Any) -> None:
    with pytest.raises(ValueError, match=r"prompt 1 is float .*a string, a list of token ids, or a conversation"):
        record(gpt2, chat, ["the", 2.5], max_new_tokens=2)
    with pytest.raises(ValueError, match="prompt 0, message 1 has no 'role'"):
        record(gpt2, chat, [[{"role": "user", "content": "a"}, {"content": "b"}]], max_new_tokens=2)


def test_failures_the_html_report_and_genguard_show_print_the_conversation(
    gpt2: Any, chat: Any, one_thread: None, tmp_path: Any
) -> None:
    import dataclasses
    import io

    from pytest_genguard.cli.show import show
    from pytest_genguard.core.comparison import window
    from pytest_genguard.core.html import Page

    trace = record(gpt2, chat, [CONVERSATION], max_new_tokens=3)
    p = trace[0]
    steps = (dataclasses.replace(p.steps[0], logprob=p.steps[0].logprob - 1.0), *p.steps[1:])
    broken = dataclasses.replace(trace, prompts=(dataclasses.replace(p, steps=steps),))
    result = compare(trace, broken)
    assert result.verdict is Verdict.REGRESSION
    lines = window(result, result.divergences[0])
    assert lines[0] == "prompt 0 (a conversation), steps around the divergence:"
    assert lines[1:3] == ["   system: 'You answer in one word.'", "   user: 'the quick brown fox'"]
    assert "user: &#x27;the quick brown fox&#x27;" in Page().side_by_side(result, 0)
    path = tmp_path / "chat.genguard"
    path.write_text(trace.to_json())
    out = io.StringIO()
    show(path, stream=out)
    assert "user: 'the quick brown fox'" in out.getvalue()


def test_chat_template_kwargs_without_a_conversation_is_refused(gpt2: Any, chat: Any) -> None:
    with pytest.raises(ValueError, match="chat_template_kwargs is for conversations, and no prompt is one"):
        record(gpt2, chat, ["the quick", [5, 6]], max_new_tokens=2, chat_template_kwargs={"enable_thinking": False})
