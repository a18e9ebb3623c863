"""Fixtures shared by the torch-side tests: the shipped tokenizer, the tiny GPT-2, one torch thread."""

from collections.abc import Iterator
from typing import Any

# hypothesis' pytest plugin imports hypothesis at the end of every session. pytester's in-process runs restore
# sys.modules afterwards, so unless hypothesis is already imported out here each in-process run imports it again
# (measured: 7.4 s -> 0.5 s for a one-test pytester run on 2 busy cores).
import hypothesis  # noqa: F401
import pytest
import torch

from pytest_genguard.hf.tiny import tiny_model, tiny_tokenizer


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    """The shipped tiny tokenizer (one per test module: a test may change its padding side)."""
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def gpt2() -> Any:
    """An untrained tiny GPT-2 (one per test module)."""
    return tiny_model("gpt2")


@pytest.fixture(scope="module")
def one_thread() -> Iterator[None]:
    """Tiny models on a shared 2-core machine: a second torch thread only adds contention (60x slower under load)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
