"""torch's intra-op thread count for a block, restored after it (a thread count is a noise axis and a cache key)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def threads(n: int) -> Iterator[None]:
    """torch at `n` threads inside the block, at its old count after."""
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)
