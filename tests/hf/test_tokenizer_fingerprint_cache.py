"""The tokenizer fingerprint is computed once per tokenizer state (issue 32: serializing a 150k-token vocabulary cost
20-25 ms on every record() call), and every change the fingerprint covers is still seen."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_genguard.hf import tokenizer_hash
from pytest_genguard.hf.tiny import tiny_tokenizer


@pytest.fixture
def computed(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Records each full computation of a fingerprint."""
    calls: list[Any] = []
    real = tokenizer_hash._tokenizer_fingerprint

    def counting(tokenizer: Any) -> Any:
        calls.append(tokenizer)
        return real(tokenizer)

    monkeypatch.setattr(tokenizer_hash, "_tokenizer_fingerprint", counting)
    return calls


def test_an_unchanged_tokenizer_is_fingerprinted_once(computed: list[Any]) -> None:
    tokenizer = tiny_tokenizer()
    first = tokenizer_hash.tokenizer_fingerprint(tokenizer)
    assert [tokenizer_hash.tokenizer_fingerprint(tokenizer) for _ in range(3)] == [first] * 3
    assert len(computed) == 1
    assert tokenizer_hash.tokenizer_fingerprint(tiny_tokenizer()) == first  # another object, the same tokenizer
    assert len(computed) == 2


@pytest.mark.parametrize(
    "change",
    [
        lambda t: t.add_tokens(["genguard"]),
        lambda t: t.add_special_tokens({"additional_special_tokens": ["<extra>"]}),
        lambda t: setattr(t, "pad_token", t.eos_token),
        lambda t: setattr(t, "chat_template", "{{ messages }}"),
    ],
    ids=["added token", "added special token", "pad token", "chat template"],
)
def test_every_change_the_fingerprint_covers_is_seen_after_a_cached_call(change: Any) -> None:
    tokenizer = tiny_tokenizer()
    before = tokenizer_hash.tokenizer_fingerprint(tokenizer)
    tokenizer_hash.tokenizer_fingerprint(tokenizer)  # cached now
    change(tokenizer)
    after = tokenizer_hash.tokenizer_fingerprint(tokenizer)
    assert after != before
    # ... and it is what a fresh computation gives (the negative control: the cache's answer is the uncached one).
    assert after == tokenizer_hash._tokenizer_fingerprint(tokenizer)
