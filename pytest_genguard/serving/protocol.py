"""What genguard needs from a server, whatever its API: the shapes every server mapping returns.

A server mapping (`vllm.py`, `llama_server.py`; SGLang, TGI would be one module each) says how to probe the server, how
to score a given token sequence in one request (teacher forcing), how to let it generate (its own decoding, the
fallback), and how to ask its sampler's distribution after a prefix (a sampled snapshot's steps: `SamplerApi`).
`record.py` and `sampler.py` turn these shapes into what the rules judge; they never see the server's JSON.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_genguard.core.jsontext import JSONScalar
from pytest_genguard.core.sampling import Cause, SamplerSettings, Served
from pytest_genguard.serving.http import Endpoint

__all__ = ["MODES", "Alignment", "Generated", "SamplerApi", "Scored", "ServerInfo", "ServerMapping"]

MODES = ("teacher forced", "regenerated")
"""How a server is judged, best first: teacher forcing the whole path in one request (the server scores the given
token sequence), or the server's own decoding compared as a regenerated trace (where it can only continue)."""


@dataclass(frozen=True)
class ServerInfo:
    """What a server says about itself, probed once."""

    engine: str  # "vllm"
    version: str | None
    url: str
    model: str  # the served model name requests name
    details: Mapping[str, JSONScalar] = field(default_factory=dict)  # what else it reported (root, max_model_len)
    tokenize: bool = False  # it serves /tokenize
    dtype: str | None = None  # the served dtype, when the server reports it
    normalizer_terms: int | None = None
    """How many float32 probabilities the server sums to normalize its logprobs (llama-server: the vocabulary); None
    where they are a log-softmax of the logits (`core.environments.NORMALIZER_FIELD`)."""

    def label(self, mode: str) -> str:
        """``vllm 0.32.0 at http://127.0.0.1:8000, teacher forced``: the environment line's name of this server."""
        version = f" {self.version}" if self.version else ""
        return f"{self.engine}{version} at {self.url}, {mode}"


@dataclass(frozen=True)
class Scored:
    """One position the server scored: the token there, its logprob, and the top-k as (id, logprob), best first."""

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...]
    token_text: str | None = None  # how the server decodes the token, when it says


@dataclass(frozen=True)
class Generated:
    """The server's own decoding of one prompt: the tokens it chose, scored, and why it stopped."""

    steps: tuple[Scored, ...]
    finish_reason: str  # genguard's: "eos" or "length"


@dataclass(frozen=True)
class Alignment:
    """Request fields that make a server's sampler do what transformers does where its own semantics differ (an
    order, a window), and the cause they fix: offered in the message, sent with ``--align-sampler``.

    `applies(sampler)` says whether the snapshot's settings meet the difference at all; `fields(sampler,
    prefix_length)` are the fields to add to a step's request."""

    name: str  # "samplers"
    cause: Cause
    applies: Callable[[SamplerSettings], bool]
    fields: Callable[[SamplerSettings, int], dict[str, Any]]


@dataclass(frozen=True)
class SamplerApi:
    """How a server shows its sampler: the snapshot's settings as its request fields, one step's post-sampling
    distribution, the request changes that align its semantics with transformers', and the differences no request
    changes.

    `fields(sampler, prefix_length)`: the settings mapped onto the server's own fields (`ValueError` naming a setting
    it has none for). `distribution(endpoint, info, prefix_ids, fields, asked)`: the server's probabilities after its
    sampler for the token following `prefix_ids`, its top `asked`. `check(endpoint, info)`: raises `ServerError`
    naming the server flag when the server cannot show a post-sampling distribution (vLLM's raw logprobs mode).
    `known(sampler)`: the causes of differences no request can align (vLLM's min-p before top-p), from the settings.
    `cap(endpoint, info)`: the most tokens one answer may list (None: no cap)."""

    fields: Callable[[SamplerSettings, int], dict[str, Any]]
    distribution: Callable[[Endpoint, ServerInfo, Sequence[int], Mapping[str, Any], int], Served]
    alignments: tuple[Alignment, ...] = ()
    check: Callable[[Endpoint, ServerInfo], None] | None = None
    known: Callable[[SamplerSettings], tuple[Cause, ...]] = lambda sampler: ()
    cap: Callable[[Endpoint, ServerInfo], int | None] = lambda endpoint, info: None


@dataclass(frozen=True)
class ServerMapping:
    """One server API: probe it, tokenize text, score a given sequence, and let it generate.

    `tokenize(endpoint, info, text, add_special)` gives the server's ids of a text (`add_special`: the special
    tokens a completion prompt gets, such as BOS; False for a rendered conversation, whose template wrote them).
    `score(endpoint, info, ids, start, k)` returns one `Scored` per position from `start` to the end of `ids` (the
    logprob of ``ids[p]`` given ``ids[:p]``, and the top-k there), in one request; None where the server cannot
    score a given sequence. `generate(endpoint, info, prompt_ids, max_tokens, k)` decodes greedily.
    """

    name: str
    probe: Callable[[Endpoint, str | None], ServerInfo]
    tokenize: Callable[[Endpoint, ServerInfo, str, bool], tuple[int, ...]]
    score: Callable[[Endpoint, ServerInfo, Sequence[int], int, int], list[Scored]] | None
    generate: Callable[[Endpoint, ServerInfo, Sequence[int], int, int], Generated]
    logprobs: str = "raw"  # what its logprobs are: "raw" log-softmax of the logits, or after its processors
    reset_cache: Callable[[Endpoint], bool] | None = None  # empty its prefix cache; False when it does not offer to
    max_logprobs: Callable[[Endpoint, ServerInfo, int], int | None] | None = None
    """The most logprobs per position the server returns (its cap; None: it sets none), probed with one token id."""
    render: Callable[[Endpoint, ServerInfo, Sequence[Mapping[str, Any]], Mapping[str, Any]], str] | None = None
    """The text the server's chat template makes of a conversation (with `chat_template_kwargs`), to compare with the
    snapshot's; None where the server does not say."""
    sampler: SamplerApi | None = None
    """How its sampler is judged along a sampled snapshot's path; None where the server cannot show it."""
