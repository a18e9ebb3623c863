"""record()'s bad input and noise: a prompt with a lone surrogate is a ValueError naming it (not tokenizers' bare
TypeError); a top_k beyond the vocabulary is an error (not a silent clamp); genguard's own generate() calls do not
print transformers' "Both max_new_tokens and max_length" warning."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from pytest_genguard import record
from pytest_genguard.hf.record import generate_from_ids

CLASH = "Both `max_new_tokens`"


def test_a_prompt_with_a_lone_surrogate_is_a_value_error_naming_it(gpt2: Any, tokenizer: Any) -> None:
    with pytest.raises(TypeError):  # what the tokenizer alone does with it
        tokenizer(["ok", "bad \udcff"])
    with pytest.raises(ValueError, match=r"prompt 1 'bad \\udcff' has a lone surrogate '\\udcff' at position 4"):
        record(gpt2, tokenizer, ["ok", "bad \udcff"], max_new_tokens=2)


def test_a_top_k_beyond_the_vocabulary_is_an_error(gpt2: Any, tokenizer: Any) -> None:
    vocab = gpt2.get_output_embeddings().weight.shape[0]
    with pytest.raises(ValueError, match=rf"top_k={vocab + 1} alternatives per step, but the model scores {vocab}"):
        record(gpt2, tokenizer, ["the quick"], max_new_tokens=2, top_k=vocab + 1)
    trace = record(gpt2, tokenizer, ["the quick"], max_new_tokens=2, top_k=vocab)  # the whole vocabulary is fine
    assert len(trace.prompts[0].steps[0].top_ids) == vocab


@pytest.fixture
def max_length_set(gpt2: Any) -> Any:
    """The model's generation config has a max_length, as a Trainer-saved checkpoint's may."""
    old = gpt2.generation_config.max_length
    gpt2.generation_config.max_length = 20
    yield gpt2
    gpt2.generation_config.max_length = old


class _Seen(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def seen() -> Any:
    """What transformers' generation logger lets through (its own handler writes to a stream captured elsewhere)."""
    handler = _Seen()
    logger = logging.getLogger("transformers.generation.utils")
    logger.addHandler(handler)
    yield handler.messages
    logger.removeHandler(handler)


def _clashes(messages: list[str]) -> int:
    count = sum(1 for m in messages if m.startswith(CLASH))
    messages.clear()
    return count


def test_record_does_not_print_the_max_length_warning(max_length_set: Any, tokenizer: Any, seen: list[str]) -> None:
    ids = tokenizer(["the quick"], return_tensors="pt")
    # transformers itself warns (4.57 only when max_length is an argument, 5.x also when the model's config has one) ...
    max_length_set.generate(**ids, max_new_tokens=2, max_length=20, do_sample=False)
    assert _clashes(seen) == 1
    record(max_length_set, tokenizer, ["the quick"], max_new_tokens=2)  # ... genguard's calls do not
    generate_from_ids(max_length_set, tokenizer, ["the quick"], [ids["input_ids"][0].tolist()], max_new_tokens=2)
    assert _clashes(seen) == 0
    max_length_set.generate(**ids, max_new_tokens=2, max_length=20, do_sample=False)  # the filter does not outlive
    assert _clashes(seen) == 1
