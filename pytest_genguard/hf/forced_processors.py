"""Logits processors applied to every step of a teacher-forced path at once.

`generate()` calls its processors once per step on that step's scores and the ids so far. Teacher forcing knows every
step's ids in advance (the prompt and the recorded path), so each processor can be applied to all steps together:

- processors that ignore the ids (temperature, top-k, top-p, min-p, typical, suppressed tokens) are called once on the
  steps flattened into rows: they work row by row, so this is the same computation;
- the repetition penalty needs, per step, the tokens seen so far: each token's first position in the sequence gives
  that for every step in one comparison, and the penalty is then the processor's own elementwise formula;
- the n-gram ban needs, per step, the tokens that completed an earlier occurrence of the last n-1 ids: one pass over
  the sequence that adds each n-gram as it completes gives every step's bans;
- minimum lengths mask EOS at the steps where the sequence is still too short.

Each of those reads the processor's own attributes, so what a transformers version does differently (4.5x's
repetition penalty counts left padding, 5.x skips it) carries over. Any other processor (forced BOS/EOS, suppression
at the first step, a class this module does not know) is called step by step, as generate() would: exact, only slower.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["TRUNCATING", "apply_along_path"]

# Steps are processed in chunks so that the [batch, steps, vocab] temporaries stay bounded for large vocabularies.
_CHUNK_ELEMENTS = 1 << 24

TRUNCATING = frozenset(
    {
        "TopKLogitsWarper",
        "TopPLogitsWarper",
        "MinPLogitsWarper",
        "TypicalLogitsWarper",
        "EpsilonLogitsWarper",
        "EtaLogitsWarper",
        "TopHLogitsWarper",
    }
)
"""The processors that remove tokens rather than move their scores (`sampled_support`'s near-threshold ranges)."""

_ROWWISE = (TRUNCATING - {"TopHLogitsWarper"}) | {"TemperatureLogitsWarper", "SuppressTokensLogitsProcessor"}
"""Processors whose result for a row depends on that row of scores only (never on the ids)."""


def apply_along_path(
    processors: Iterable[Any], logits: torch.Tensor, sequences: torch.Tensor, start: int
) -> torch.Tensor:
    """The scores `generate()` would have had at each step: `processors` applied in order to `logits` [B, T, V],
    where step t saw the ids `sequences[:, : start + t]`. `logits` is left as it is: the processors here work on a
    copy, some of them in place."""
    scores = logits.clone()
    for processor in processors:
        cls = type(processor)
        name = cls.__name__ if cls.__module__.startswith("transformers.") else ""  # a subclass may do anything
        special = _BY_CLASS.get(name)
        if special is not None:
            scores = special(processor, scores, sequences, start)
        elif name in _ROWWISE:
            scores = _rowwise(processor, scores, sequences)
        else:
            scores = _step_by_step(processor, scores, sequences, start)
    return scores


def _rowwise(processor: Any, scores: torch.Tensor, sequences: torch.Tensor) -> torch.Tensor:
    batch, steps, vocab = scores.shape
    flat = scores.reshape(batch * steps, vocab)
    ids = sequences.new_zeros((batch * steps, 1))  # unused by these processors; shaped like generate()'s
    out: torch.Tensor = processor(ids, flat)
    return out.reshape(batch, steps, vocab)


def _step_by_step(processor: Any, scores: torch.Tensor, sequences: torch.Tensor, start: int) -> torch.Tensor:
    import torch

    steps = scores.shape[1]
    return torch.stack([processor(sequences[:, : start + t], scores[:, t].clone()) for t in range(steps)], dim=1)


def _mask_eos_where(scores: torch.Tensor, eos: Any, steps_masked: torch.Tensor) -> torch.Tensor:
    """EOS at -inf at the steps where `steps_masked` [T] is true, as the length processors do (in place: `scores`
    is this module's own copy)."""
    import torch

    ids = eos if isinstance(eos, torch.Tensor) else torch.tensor(eos if isinstance(eos, list) else [eos])
    vocab = scores.shape[-1]
    ids = ids.to(scores.device).reshape(-1)
    ids = ids[(ids >= 0) & (ids < vocab)]  # isin() over the vocabulary: an id outside it masks nothing
    steps = steps_masked.nonzero().reshape(-1).to(scores.device)
    if len(ids) and len(steps):
        scores[:, steps[:, None], ids[None, :]] = -math.inf
    return scores


def _min_length(processor: Any, scores: torch.Tensor, sequences: torch.Tensor, start: int) -> torch.Tensor:
    import torch

    lengths = start + torch.arange(scores.shape[1])  # input_ids.shape[-1] at each step
    return _mask_eos_where(scores, processor.eos_token_id, lengths < processor.min_length)


def _min_new_tokens(processor: Any, scores: torch.Tensor, sequences: torch.Tensor, start: int) -> torch.Tensor:
    import torch

    new = start + torch.arange(scores.shape[1]) - processor.prompt_length_to_skip
    return _mask_eos_where(scores, processor.eos_token_id, new < processor.min_new_tokens)


def _ignored_prefix(processor: Any, batch: int) -> torch.Tensor:
    """Per row, how many leading ids the repetition penalty skips: 5.x's per-row padding lengths, an int, or none
    (4.5x skips only a truthy int)."""
    import torch

    ignore = getattr(processor, "prompt_ignore_length", None)
    if isinstance(ignore, torch.Tensor):
        return ignore.to("cpu", torch.long).reshape(batch)
    return torch.full((batch,), int(ignore) if ignore else 0, dtype=torch.long)


def _repetition_penalty(processor: Any, scores: torch.Tensor, sequences: torch.Tensor, start: int) -> torch.Tensor:
    """Every token already in the ids (from the skipped prefix on) is penalized: with each token's first position,
    "seen before step t" is `first position < start + t`. Only the columns of tokens that occur at all are touched
    (in place: `scores` is this module's own copy)."""
    import torch

    batch, steps, vocab = scores.shape
    length = sequences.shape[1]
    device = sequences.device
    positions = torch.arange(length, device=device)
    counted = positions[None, :] >= _ignored_prefix(processor, batch).to(device)[:, None]
    ids = torch.where(counted, sequences.clamp(max=vocab), vocab)  # skipped and out-of-vocabulary ids: a spare column
    first = torch.full((batch, vocab + 1), length, dtype=torch.long, device=device)
    first.scatter_reduce_(1, ids, positions.expand(batch, length), reduce="amin")
    occurring = (first[:, :vocab] < length).any(dim=0).nonzero().reshape(-1)
    if not len(occurring):
        return scores
    first = first[:, occurring].to(scores.device)
    occurring = occurring.to(scores.device)
    penalty = processor.penalty
    chunk = max(1, _CHUNK_ELEMENTS // max(1, batch * len(occurring)))
    for lo in range(0, steps, chunk):
        hi = min(steps, lo + chunk)
        part = scores[:, lo:hi].index_select(2, occurring)
        seen = first[:, None, :] < (start + torch.arange(lo, hi, device=scores.device))[None, :, None]
        penalized = torch.where(part < 0, part * penalty, part / penalty)
        scores[:, lo:hi].index_copy_(2, occurring, torch.where(seen, penalized, part))
    return scores


def _ngram_bans(ids: list[int], n: int, start: int, steps: int) -> Iterable[tuple[int, int]]:
    """(step, token) pairs the n-gram ban sets to -inf along one row: at step t (cur_len = start + t) every n-gram
    that lies wholly in ids[:cur_len] and begins with the last n-1 ids bans its last token."""
    completions: dict[tuple[int, ...], set[int]] = {}
    added = 0  # the next n-gram (by start position) to add once it lies wholly in the ids so far
    for t in range(steps):
        cur_len = start + t
        if cur_len < n:
            continue
        while added <= cur_len - n:
            completions.setdefault(tuple(ids[added : added + n - 1]), set()).add(ids[added + n - 1])
            added += 1
        for token in completions.get(tuple(ids[cur_len - n + 1 : cur_len]), ()):
            yield t, token


def _no_repeat_ngram(processor: Any, scores: torch.Tensor, sequences: torch.Tensor, start: int) -> torch.Tensor:
    import torch

    steps, vocab = scores.shape[1], scores.shape[2]
    n = int(processor.ngram_size)
    rows: list[int] = []
    at: list[int] = []
    tokens: list[int] = []
    for b, ids in enumerate(sequences.tolist()):
        for t, token in _ngram_bans(ids, n, start, steps):
            if token < vocab:  # an id past the scores cannot be generated: nothing to ban (as 5.x clamps it away)
                rows.append(b)
                at.append(t)
                tokens.append(token)
    if not rows:
        return scores
    device = scores.device
    index = (torch.tensor(rows, device=device), torch.tensor(at, device=device), torch.tensor(tokens, device=device))
    scores[index] = -math.inf  # in place: `scores` is this module's own copy
    return scores


_BY_CLASS: dict[str, Callable[[Any, torch.Tensor, torch.Tensor, int], torch.Tensor]] = {
    "RepetitionPenaltyLogitsProcessor": _repetition_penalty,
    "NoRepeatNGramLogitsProcessor": _no_repeat_ngram,
    "MinLengthLogitsProcessor": _min_length,
    "MinNewTokensLengthLogitsProcessor": _min_new_tokens,
}
