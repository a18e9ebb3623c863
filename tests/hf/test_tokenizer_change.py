"""A changed tokenizer makes a trace stale, and the reason says what changed (vocabulary size, added tokens, merges,
special tokens, normalizer), not only two hashes (issue 33). Traces without those parts (older versions) still say
it with the hashes."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from tokenizers import normalizers

from pytest_genguard.core.compare import compare
from pytest_genguard.core.trace import GenerationTrace
from pytest_genguard.hf.record import record
from pytest_genguard.hf.tiny import tiny_tokenizer
from pytest_genguard.hf.tokenizer_hash import tokenizer_fingerprint


def _added(tok: Any) -> None:
    tok.add_tokens(["<x>", "<y>"])


def _pad(tok: Any) -> None:
    tok.pad_token = "<unk>"


def _normalizer(tok: Any) -> None:
    _added(tok)
    tok.backend_tokenizer.normalizer = normalizers.Lowercase()


CHANGES = {
    "added tokens": (_added, "tokenizer changed: vocabulary size 768 -> 770, added tokens 4 -> 6"),
    "pad token": (_pad, "tokenizer changed: special token pad_token '<pad>' -> '<unk>'"),
    "normalizer": (
        _normalizer,
        "tokenizer changed: vocabulary size 768 -> 770, added tokens 4 -> 6, normalizer none -> ",
    ),
}


@pytest.fixture(scope="module")
def base(gpt2: Any, tokenizer: Any) -> GenerationTrace:
    return record(gpt2, tokenizer, "the quick", max_new_tokens=2)


@pytest.mark.parametrize("change", list(CHANGES))
def test_the_stale_reason_says_what_changed_in_the_tokenizer(gpt2: Any, base: GenerationTrace, change: str) -> None:
    edit, reason = CHANGES[change]
    tok = tiny_tokenizer()
    edit(tok)
    now = dataclasses.replace(base, tokenizer=tokenizer_fingerprint(tok))
    (said,) = compare(base, now).stale_reasons
    assert said.startswith(reason)


def test_the_parts_survive_the_file_and_older_files_still_name_the_hashes(base: GenerationTrace) -> None:
    assert base.tokenizer is not None and base.tokenizer.parts
    back = GenerationTrace.from_json(base.to_json())
    assert (
        back.tokenizer == base.tokenizer and back.tokenizer is not None and back.tokenizer.parts == base.tokenizer.parts
    )
    old = dataclasses.replace(base, tokenizer=dataclasses.replace(base.tokenizer, parts=None))
    assert '"parts"' not in old.to_json()
    tok = tiny_tokenizer()
    _added(tok)
    (said,) = compare(old, dataclasses.replace(base, tokenizer=tokenizer_fingerprint(tok))).stale_reasons
    assert said == (
        f"tokenizer changed: PreTrainedTokenizerFast {base.tokenizer.hash[:12]} -> PreTrainedTokenizerFast "
        f"{tokenizer_fingerprint(tok).hash[:12]}"
    )


def test_an_unchanged_tokenizer_is_not_stale(base: GenerationTrace) -> None:
    now = dataclasses.replace(base, tokenizer=tokenizer_fingerprint(tiny_tokenizer()))
    assert compare(base, now).stale_reasons == ()
