"""What a re-recorded snapshot changed names a replaced prompt where it differs, as the stale reason does
(`text_diff.prompt_difference`): two long prompts that differ late were both shown cut at 30 characters, the same
text on both sides; two conversations are named by their first differing message."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import trace_builder

from pytest_genguard.core.compare import compare
from pytest_genguard.core.documents import Outcome
from pytest_genguard.core.review import accepted_changes
from pytest_genguard.core.trace import GenerationTrace

PATH = [trace_builder.step([(3, -0.01), (5, -5.0)]), trace_builder.step([(0, -0.01), (7, -5.1)])]
ASK = "Summarise the quarterly report for the board in plain words "  # 60 characters
OLD = ASK + "revenue rose 4 in Q3"
NEW = ASK + "costs fell 2% in Q3."


def changes(old: GenerationTrace, new: GenerationTrace) -> list[str]:
    cmp = compare(old, new)
    return accepted_changes(Outcome(cmp.verdict, cmp.render(), cmp))


def test_two_long_prompts_that_differ_late_are_named_where_they_differ() -> None:
    assert (len(ASK), len(OLD), len(NEW)) == (60, 80, 80)
    lines = changes(trace_builder.trace(PATH, prompts=[OLD]), trace_builder.trace(PATH, prompts=[NEW]))
    where = "at character 60: ...'plain words revenue rose 4 '... -> ...'plain words costs fell 2% i'..."
    assert lines == [f"why stale: prompts changed: prompt 0 {where}", f"prompt 0 replaced: {where} (not compared)"]


def conversation(*messages: Mapping[str, Any]) -> GenerationTrace:
    """A trace of one conversation; its `prompt` is the rendered text, as `record()` stores it."""
    rendered = "\n".join(f"{m['role']}: {m['content']}" for m in messages)
    base = trace_builder.trace(PATH, prompts=[rendered])
    return dataclasses.replace(base, prompts=(dataclasses.replace(base.prompts[0], messages=messages),))


SYSTEM = {"role": "system", "content": "You answer in one sentence."}


def test_two_conversations_that_differ_in_the_second_message_are_named_by_that_message() -> None:
    old = conversation(SYSTEM, {"role": "user", "content": "How did revenue move in the third quarter of this year?"})
    new = conversation(SYSTEM, {"role": "user", "content": "How did revenue move in the fourth quarter of this year?"})
    lines = changes(old, new)
    where = (
        "message 1 (user) at character 28: ...'move in the third quarter o'... -> ...'move in the fourth quarter '..."
    )
    assert lines == [f"why stale: prompts changed: prompt 0 {where}", f"prompt 0 replaced: {where} (not compared)"]
