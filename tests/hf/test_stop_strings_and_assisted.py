"""record() with transformers' own spelling of stop strings (``tokenizer=`` as a keyword) and with assisted decoding:
its batch limit said by genguard, the assistant named in the settings (issue 32)."""

from __future__ import annotations

from typing import Any

import pytest
from invariant_support import PROBES

from pytest_genguard import compare
from pytest_genguard.hf.record import record
from pytest_genguard.hf.tiny import tiny_model


def test_stop_strings_with_the_tokenizer_as_a_keyword_work_as_transformers_documents(
    gpt2: Any, tokenizer: Any, one_thread: None
) -> None:
    plain = record(gpt2, tokenizer, PROBES[:2], max_new_tokens=8)
    stop = plain[0].text[2:4] or plain[0].text[:1]
    given = record(gpt2, tokenizer, PROBES[:2], max_new_tokens=8, stop_strings=[stop], tokenizer=tokenizer)
    implied = record(gpt2, tokenizer, PROBES[:2], max_new_tokens=8, stop_strings=[stop])
    assert given[0].finish_reason == "stop" and len(given[0].steps) < len(plain[0].steps)
    assert compare(implied, given).verdict.ok


def test_assisted_decoding_names_the_assistant_and_records_one_prompt(
    gpt2: Any, tokenizer: Any, one_thread: None
) -> None:
    assistant = tiny_model("gpt2", seed=1)
    trace = record(gpt2, tokenizer, PROBES[0], max_new_tokens=6, assistant_model=assistant)
    assert str(trace.settings["assistant_model"]).startswith("gpt2/")
    assert trace[0].token_ids == record(gpt2, tokenizer, PROBES[0], max_new_tokens=6)[0].token_ids  # greedy either way
    assert "assistant_model" not in record(gpt2, tokenizer, PROBES[0], max_new_tokens=1).settings


def test_assisted_decoding_with_two_prompts_is_refused_by_genguard_naming_the_limit(gpt2: Any, tokenizer: Any) -> None:
    with pytest.raises(
        ValueError, match=r"^record\(\): assisted decoding \(assistant_model=\) generates for one prompt"
    ):
        record(gpt2, tokenizer, PROBES[:2], max_new_tokens=2, assistant_model=tiny_model("gpt2", seed=1))
