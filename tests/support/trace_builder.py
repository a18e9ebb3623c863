"""The one builder of hand-made traces for the tests (no torch): steps from their top-k, traces from paths of steps.

Each test module keeps only what its story needs (its vocabulary, a fingerprint it names in a message); the shape of
a trace is written here once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_genguard.core.jsontext import JSONScalar
from pytest_genguard.core.trace import GenerationTrace, ModelFingerprint, PromptTrace, Step, TokenizerFingerprint

MODEL = ModelFingerprint("gpt2", "c" * 64, "a" * 64, 1000, "float32")
TOKENIZER = TokenizerFingerprint("tiny", 512, "t" * 64)
ENVIRONMENT: Mapping[str, JSONScalar] = {"torch": "2.13.0", "device": "cpu"}


def step(
    top: Sequence[tuple[int, float]],
    chosen: int | None = None,
    *,
    text: str | Mapping[int, str] = "?",
    score: float | None = None,
    best: float | None = None,
) -> Step:
    """A step whose raw top-k is `top` (id, logprob; best first). The chosen token defaults to the top-1 (a chosen
    id outside `top` has logprob -20); its score defaults to its logprob. `text` is the token's text, or a
    vocabulary to look it up in ("?" when it has none)."""
    lps = dict(top)
    token_id = top[0][0] if chosen is None else chosen
    lp = lps.get(token_id, -20.0)
    token = text if isinstance(text, str) else text.get(token_id, "?")
    ids = tuple(i for i, _ in top)
    return Step(token_id, token, lp, lp if score is None else score, ids, tuple(lps.values()), best)


def trace(
    *paths: Sequence[Step],
    prompts: Sequence[str] | None = None,
    finish: str | None = "eos",
    prompt_ids: tuple[int, ...] = (1, 2),
    settings: Mapping[str, JSONScalar] | None = None,
    model: ModelFingerprint | None = MODEL,
    tokenizer: TokenizerFingerprint | None = TOKENIZER,
    environment: Mapping[str, JSONScalar] | None = None,
    **fields: Any,
) -> GenerationTrace:
    """A trace of one prompt per path (named "prompt 0", ... unless `prompts` names them). `finish=None` ends a
    path that ends in id 0 with "eos", others with "length". Other `fields` replace the trace's own."""
    names = list(prompts) if prompts is not None else [f"prompt {i}" for i in range(len(paths))]
    rows = []
    for name, path in zip(names, paths, strict=True):
        reason = finish if finish is not None else ("eos" if path and path[-1].token_id == 0 else "length")
        rows.append(PromptTrace(name, prompt_ids, tuple(path), reason))
    base = GenerationTrace(
        prompts=tuple(rows),
        settings=dict(settings if settings is not None else {"max_new_tokens": 8, "mode": "greedy"}),
        model=model,
        tokenizer=tokenizer,
        environment=dict(environment if environment is not None else ENVIRONMENT),
    )
    return dataclasses.replace(base, **fields)
