"""The parts of a trace: a generated `Step`, one prompt's `PromptTrace`, and the fingerprints of what produced it
(`ModelFingerprint`, `TokenizerFingerprint`). `pytest_genguard.core.trace` puts them together in a `GenerationTrace`
and owns the JSON form; import them from there, as every caller does. Standard library only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pytest_genguard.core.jsontext import JSONScalar
from pytest_genguard.core.text import quote

__all__ = [
    "FINISH_REASONS",
    "FinishReason",
    "ModelFingerprint",
    "PromptTrace",
    "Step",
    "Support",
    "TokenizerFingerprint",
]

FinishReason = Literal["eos", "length", "stop"]
FINISH_REASONS: tuple[str, ...] = ("eos", "length", "stop")


@dataclass(frozen=True)
class Support:
    """What a sampled step's processors kept, as `record()` saw it: enough to judge another sampler (a server's)
    without replaying its random draws (`pytest_genguard.core.sampling`).

    `kept` is how many tokens kept a finite processed score (the support after temperature, top-k, top-p, min-p...);
    `low`/`high` the support sizes within float error of the thresholds (near-threshold tokens: a sampler that rounds
    otherwise may keep any count in between), equal to `kept` where no token lies that near; `probs` the processed
    probability of each of the step's raw `top_ids` (what sampling drew from; 0.0 for a token the processors
    removed), float32."""

    kept: int
    probs: tuple[float, ...]
    low: int
    high: int

    def __post_init__(self) -> None:
        if not self.low <= self.kept <= self.high:
            raise ValueError(f"Support: kept {self.kept} outside its near-threshold range {self.low}-{self.high}")


@dataclass(frozen=True)
class Step:
    """One generated token and what the model thought of it.

    `logprob` is the raw log-softmax of the chosen token; `score` the processed score (after processors such as
    repetition penalty, temperature, top-k/top-p masks) that decoding used; `top_ids`/`top_logprobs` the raw top-k,
    best first. For beam search `score` is the beam's processed transition score.
    """

    token_id: int
    token: str
    logprob: float
    score: float
    top_ids: tuple[int, ...]
    top_logprobs: tuple[float, ...]
    best_score: float | None = None
    """The highest processed score at this step when it is not the chosen token's (None: the chosen token had the
    best score, as greedy decoding always does, or it was not recorded). Kept only when it differs, so greedy traces
    do not repeat every score."""
    lse: float | None = None
    """The log-sum-exp of the step's raw logits (logprob = logit - lse): the scale at which float32 rounds every
    logprob of the step, which the comparison rule's allowance grows with (`Tolerances.lse_ulps`). None in traces
    of pytest-genguard 0.1, which are compared with the rule of that version."""
    support: Support | None = None
    """A sampled step's support and processed probabilities (None: a greedy or beam step, or a trace recorded before
    genguard kept them); never compared by `compare()`: the sampler rule judges it (`core.sampling`)."""

    def __post_init__(self) -> None:
        if self.best_score is not None and self.best_score == self.score:
            object.__setattr__(self, "best_score", None)

    @property
    def margin(self) -> float:
        """Top-1 minus top-2 raw logprob: how far this step is from a tie (inf with fewer than two candidates)."""
        if len(self.top_logprobs) < 2:
            return math.inf
        return self.top_logprobs[0] - self.top_logprobs[1]

    @property
    def token_bytes(self) -> bytes:
        """The token's exact bytes (tokens are stored surrogate-escaped)."""
        return self.token.encode("utf-8", "surrogateescape")

    def rank_of(self, token_id: int) -> int | None:
        """0-based rank of `token_id` in this step's top-k, or None when it is not there."""
        try:
            return self.top_ids.index(token_id)
        except ValueError:
            return None


@dataclass(frozen=True)
class PromptTrace:
    """The generation for one prompt."""

    prompt: str
    prompt_ids: tuple[int, ...]
    steps: tuple[Step, ...]
    finish_reason: str
    text: str = ""
    messages: tuple[Mapping[str, Any], ...] | None = field(default=None, hash=False)
    """The conversation, when the prompt was one (a list of ``{"role", "content"}`` messages rendered with the
    tokenizer's chat template; `prompt` is then the rendered text): what failures and reports show."""
    from_ids: bool = False
    """Whether the prompt was given as token ids (`prompt` is then their decoded text, `prompt_ids` the ids)."""

    @property
    def token_ids(self) -> tuple[int, ...]:
        return tuple(s.token_id for s in self.steps)

    def conversation_lines(self, limit: int = 100) -> list[str]:
        """The conversation one message a line (``user: 'the quick brown fox'``), each cut to about `limit`
        columns; empty when the prompt was not a conversation."""
        return [f"{m.get('role', '?')}: {quote(str(m.get('content', '')), limit)}" for m in (self.messages or ())]

    @property
    def min_margin(self) -> float:
        """The smallest top-1/top-2 margin over the steps: how close this path came to a tie."""
        return min((s.margin for s in self.steps), default=math.inf)


@dataclass(frozen=True)
class ModelFingerprint:
    """Identifies the weights a trace came from, to tell a changed model from a regressed one."""

    model_type: str
    config_hash: str
    weights_hash: str
    num_parameters: int
    dtype: str
    recipe: str | None = None
    """For models fine-tuned by genguard: the hash of how they were made (architecture, data, training settings,
    seed; not library versions). Two traces of one recipe are the same model even where an upgrade or another CPU
    trained it to other weights, so they are compared rather than called stale."""
    config: Mapping[str, JSONScalar] | None = None
    """The architecture part of the model config, flat and spelled the same on every transformers version
    (`fingerprint.architecture_config`): a key set on both sides with other values is a changed model; a key that
    one transformers version writes and another does not is not. None in traces of pytest-genguard 0.1."""
    adapters: Mapping[str, JSONScalar] | None = None
    """A PEFT model's adapters (loaded, active, merged, disabled, each one's config and weights hash; see
    `pytest_genguard.core.adapters`); None for a model without adapters."""
    name_or_path: str | None = field(default=None, compare=False)
    """Where the model came from (``config._name_or_path``: a hub id as given, a local folder by its name), so a
    stale message names it. Not the identity: two folders with the same weights are one model. None: unknown."""
    revision: str | None = field(default=None, compare=False)
    """The hub commit the weights were loaded at (``config._commit_hash``), so a stale message says which revision
    changed. None: transformers does not know it (a local folder, a model built from a config)."""

    def short(self) -> str:
        return f"{self.model_type}/{self.weights_hash[:12]}"


@dataclass(frozen=True)
class TokenizerFingerprint:
    """Identifies the tokenizer (vocabulary, merges, specials) a trace was made with."""

    name: str
    vocab_size: int
    hash: str
    chat_template: str | None = None
    """The chat template (several named templates as one text, see `tokenizer_hash.chat_template_text`): part of the
    tokenizer's identity, kept as text so a change is named by its first differing line. None: no template (or a
    trace of an older pytest-genguard)."""
    parts: Mapping[str, JSONScalar] | None = field(default=None, compare=False)
    """What the hash covers, part by part, to say what changed when it does (`tokenizer_hash.tokenizer_fingerprint`):
    entry counts and short hashes of the vocabulary, merges and added tokens, the normalizer, each special token.
    Derived: the hash alone decides whether the tokenizer changed. None in traces written before it."""
    hash_version: int = 1
    """How `hash` was computed: 1, over a canonical JSON text of the vocabulary and merges (traces written before
    version 2, and tokenizers without a `tokenizers` backend); 2, over the backend's own serialization of
    its model (a JSON parse and re-encoding of a 150k-token vocabulary took ~1 s). Hashes of two versions are not
    comparable: the parts that mean the same in both are (`compare`)."""
