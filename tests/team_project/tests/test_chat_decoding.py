"""The team's decoding tests: greedy and seeded sampling of its model, against the committed snapshots."""

from __future__ import annotations

from typing import Any

import acme_chat
import pytest

import pytest_genguard

PROMPTS = ["The capital of France is", "def fibonacci(n):"]


@pytest.fixture(scope="module")
def model_and_tokenizer() -> tuple[Any, Any]:
    return acme_chat.load()


def test_greedy_decoding(model_and_tokenizer: tuple[Any, Any], genguard_snapshot: Any) -> None:
    model, tokenizer = model_and_tokenizer
    trace = pytest_genguard.record(model, tokenizer, PROMPTS, max_new_tokens=12, top_k=5)
    assert trace == genguard_snapshot


def test_sampled_decoding(model_and_tokenizer: tuple[Any, Any], genguard_snapshot: Any) -> None:
    model, tokenizer = model_and_tokenizer
    trace = pytest_genguard.record(model, tokenizer, PROMPTS, max_new_tokens=12, do_sample=True, seed=0, top_k=5)
    assert trace == genguard_snapshot
