"""Logits processors that write in place cannot touch the raw logits `record()` stores.

`generate()` keeps each step's raw logits (``output_logits=True``) as the very tensor it hands to the logits
processors. A processor in the common in-place idiom (``scores[:, i] = -inf``, ``scores.masked_fill_(...)``,
``scores += bias``) therefore rewrote the recorded raw logprobs: -5.5233 became -5.5259, and `verify()` of the trace
`record()` had just made failed as a regression. The user's processors run behind `CopyScores`, which hands them a
copy: the raw logits stay what the model computed, the processed scores are what the processors made.

transformers' own processors return new tensors; only the user's list is guarded (one copy of the step's scores per
step, and only when there is a list).
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["guarded"]


@functools.cache
def _copy_scores_class() -> type:
    """`CopyScores`, made once on first use (transformers is imported only then)."""
    from transformers import LogitsProcessor

    class CopyScores(LogitsProcessor):  # type: ignore[misc]
        """Hands the processors after it a copy of the step's scores (the raw logits `generate()` keeps)."""

        def __call__(self, input_ids: Any, scores: Any) -> Any:
            return scores.clone()

    return CopyScores


def guarded(processors: Any) -> Any:
    """The user's `logits_processor` list behind a copy of the scores; None or an empty list as given."""
    if processors is None:
        return None
    from transformers import LogitsProcessorList

    items = list(processors) if isinstance(processors, (list, tuple)) else [processors]
    if not items:
        return processors
    return LogitsProcessorList([_copy_scores_class()(), *items])
