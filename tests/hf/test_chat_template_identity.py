"""The chat template is part of the tokenizer's identity (issue 32): a changed template makes a snapshot stale, named
by its first differing line, whether or not it changes this snapshot's prompts; "prompts changed" says where."""

from __future__ import annotations

import dataclasses
from typing import Any

from chat_support import CONVERSATION, TEMPLATE, chat_tokenizer

from pytest_genguard import compare, verify
from pytest_genguard.core.text_diff import first_differing_line
from pytest_genguard.core.verdict import Verdict
from pytest_genguard.hf.record import record
from pytest_genguard.hf.tokenizer_hash import tokenizer_fingerprint

# An edit in a branch this snapshot's conversations never take (no tools given): the prompts render the same.
EDITED = TEMPLATE.replace("<|tools|>", "<|functions|>")


def test_a_template_edit_that_leaves_the_prompts_alone_is_still_stale(gpt2: Any, one_thread: None) -> None:
    before = record(gpt2, chat_tokenizer(), [CONVERSATION, "the quick"], max_new_tokens=3)
    edited = chat_tokenizer(EDITED)
    after = record(gpt2, edited, [CONVERSATION, "the quick"], max_new_tokens=3)
    assert [p.prompt_ids for p in before] == [p.prompt_ids for p in after]  # the premise: same prompts
    result = compare(before, after)
    assert result.verdict is Verdict.STALE
    text = result.render()
    line = "chat template changed: line 3 at character 49: ...'d tools %}<|tools|>{{ tools | tojson }}' -> "
    assert line in text, text
    assert "-> ...'d tools %}<|functions|>{{ tools | tojson }}'" in text, text
    # verify() against the edited tokenizer says the same
    assert "chat template changed" in verify(gpt2, edited, before, check_fingerprints=True).render()


def test_the_same_template_is_not_stale(gpt2: Any, one_thread: None) -> None:
    # Negative control for the rule above: an equal template in another tokenizer object changes nothing.
    before = record(gpt2, chat_tokenizer(), [CONVERSATION], max_new_tokens=3)
    result = compare(before, record(gpt2, chat_tokenizer(), [CONVERSATION], max_new_tokens=3))
    assert result.verdict is Verdict.IDENTICAL, result.render()


def test_a_template_is_named_by_its_first_differing_line() -> None:
    one = dataclasses.replace(tokenizer_fingerprint(chat_tokenizer()), chat_template="a\nb\nc")
    assert first_differing_line(one.chat_template, "a\nB\nc") == "line 2 'b' -> 'B'"
    assert first_differing_line(None, "a\nb") == "none -> a template of 2 lines"


def test_prompts_changed_shows_where_two_long_prompts_differ(gpt2: Any, tokenizer: Any, one_thread: None) -> None:
    common = "You are a helpful assistant. Answer briefly and politely: "
    before = record(gpt2, tokenizer, [common + "the quick brown fox"], max_new_tokens=2)
    after = record(gpt2, tokenizer, [common + "the quick green fox"], max_new_tokens=2)
    text = compare(before, after).render()
    where = "at character 68: ...': the quick brown fox' -> ...': the quick green fox'"
    assert f"prompts changed: prompt 0 {where}" in text, text


def test_prompts_changed_names_the_message_of_a_conversation(gpt2: Any, one_thread: None) -> None:
    chat = chat_tokenizer()
    other = [CONVERSATION[0], {"role": "user", "content": "the quick green fox"}]
    text = compare(record(gpt2, chat, [CONVERSATION], max_new_tokens=2), record(gpt2, chat, [other], max_new_tokens=2))
    assert "prompt 0 message 1 (user) at character 10: 'the quick brown fox' -> 'the quick green fox'" in text.render()
