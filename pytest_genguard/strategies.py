"""Hypothesis strategies for decoding tests.

Imported only by tests that use hypothesis (never by the pytest plugin), so hypothesis is imported at the top.

Trace strategies (torch-free) generate valid random `GenerationTrace` objects for fuzzing anything that consumes
traces: the JSON form, the comparison rule, the failure text, reports. Values are float32 (what traces store), tokens
are deliberately odd (lone surrogates standing for raw bytes, quotes, backslashes, newlines, emoji, zero-width and
combining characters), generations may be empty.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from hypothesis import HealthCheck, settings, strategies as st

from pytest_genguard.core.jsontext import JSONScalar
from pytest_genguard.core.trace import (
    FINISH_REASONS,
    GenerationTrace,
    ModelFingerprint,
    PromptTrace,
    Step,
    Support,
    TokenizerFingerprint,
)
from pytest_genguard.hf.tiny import corpus_texts

# ---- trace strategies (torch-free)

ODD_TOKENS: tuple[str, ...] = (
    "",
    " ",
    "  ",
    "\n",
    "\t",
    "\r\n",
    "'",
    '"',
    "\\",
    "\\n",
    "\udc80",  # a lone continuation byte (0x80) of a byte-level BPE token, surrogate-escaped
    "\udce2\udc82",  # the first two bytes of a 3-byte UTF-8 character
    "\udcff",
    " caf\udcc3",
    "😀",
    "👍🏽",
    "\u200b",
    "\u2028",
    "\x85",
    "e\u0301",
    "’",
    "<|endoftext|>",
    "Ġthe",
    "▁the",
)
"""Tokens that have broken display or serialisation code before."""

DTYPES: tuple[str, ...] = ("float32", "float16", "bfloat16", "torch.float32", "torch.bfloat16")
MODEL_TYPES: tuple[str, ...] = ("gpt2", "llama", "t5")

# Surrogates only as surrogateescape makes them (U+DC80-U+DCFF, one per raw byte): text decoded from UTF-8 never
# holds others, and JSON cannot keep a high surrogate and a low one apart (it reads the pair as one character).
_ALPHABET = st.one_of(st.characters(exclude_categories=["Cs"]), st.integers(0xDC80, 0xDCFF).map(chr))


def token_texts(max_size: int = 8) -> st.SearchStrategy[str]:
    """Token strings as traces store them: any text, lone surrogates \\udc80-\\udcff for raw bytes."""
    return st.one_of(st.sampled_from(ODD_TOKENS), st.text(_ALPHABET, max_size=max_size))


def float32s(
    *, allow_nan: bool = False, min_value: float | None = None, max_value: float | None = None
) -> st.SearchStrategy[float]:
    """float32 values; NaN and infinities only with `allow_nan`."""
    return st.floats(min_value=min_value, max_value=max_value, width=32, allow_nan=allow_nan, allow_infinity=allow_nan)


def _descending(values: list[float]) -> list[float]:
    # Best first; NaN (which torch.topk may put anywhere) goes last so that the order is well defined.
    return sorted(values, key=lambda v: (v == v, v), reverse=True)


@st.composite
def supports(draw: st.DrawFn, *, k: int) -> Support:
    """A sampled step's support: a kept count inside its near-threshold range and `k` processed probabilities."""
    kept = draw(st.integers(1, 60_000))
    low = draw(st.integers(1, kept))
    high = draw(st.integers(kept, kept + 300))
    probs = draw(st.lists(float32s(min_value=0.0, max_value=1.0), min_size=k, max_size=k))
    return Support(kept, tuple(sorted(probs, reverse=True)), low, high)


@st.composite
def steps(
    draw: st.DrawFn,
    *,
    top_k: int = 5,
    vocab: Sequence[str] | None = None,
    vocab_size: int = 16,
    allow_nan: bool = False,
    sorted_topk: bool = True,
) -> Step:
    """One `Step` with `top_k` distinct candidate ids (fewer if the vocabulary is smaller).

    With `vocab` (token texts), id i has text ``vocab[i % len(vocab)]`` (one id, one text); otherwise texts are drawn.
    The chosen token is usually one of the top-k, with a logprob equal to its top-k entry; sometimes not, as sampling
    does.
    """
    size = max(vocab_size, 1)
    k = max(min(top_k, size), 0)
    ids = draw(st.lists(st.integers(0, size - 1), min_size=k, max_size=k, unique=True))
    logprobs = draw(st.lists(float32s(allow_nan=allow_nan), min_size=k, max_size=k))
    if sorted_topk:
        logprobs = _descending(logprobs)
    from_topk: bool = draw(st.booleans())
    if ids and from_topk:
        rank = draw(st.integers(0, len(ids) - 1))
        token_id, logprob = ids[rank], logprobs[rank]
    else:
        token_id = draw(st.integers(0, size - 1))
        logprob = draw(float32s(allow_nan=allow_nan))
    score = draw(st.one_of(st.just(logprob), float32s(allow_nan=allow_nan)))
    token = vocab[token_id % len(vocab)] if vocab else draw(token_texts())
    support = draw(st.one_of(st.none(), supports(k=len(ids))))  # a sampled step's, sometimes
    return Step(token_id, token, logprob, score, tuple(ids), tuple(logprobs), support=support)


@st.composite
def prompt_traces(
    draw: st.DrawFn,
    *,
    max_steps: int = 8,
    top_k: int = 5,
    vocab: Sequence[str] | None = None,
    vocab_size: int = 16,
    allow_nan: bool = False,
    sorted_topk: bool = True,
    prompt: str | None = None,
) -> PromptTrace:
    """One prompt's generation: 0..`max_steps` steps, a finish reason, the decoded text."""
    step_list = draw(
        st.lists(
            steps(top_k=top_k, vocab=vocab, vocab_size=vocab_size, allow_nan=allow_nan, sorted_topk=sorted_topk),
            max_size=max_steps,
        )
    )
    return PromptTrace(
        prompt=draw(st.text(_ALPHABET, max_size=20)) if prompt is None else prompt,
        prompt_ids=tuple(draw(st.lists(st.integers(0, max(vocab_size, 1) - 1), max_size=6))),
        steps=tuple(step_list),
        finish_reason=draw(st.sampled_from(FINISH_REASONS)),
        text="".join(s.token for s in step_list),
    )


def _hashes() -> st.SearchStrategy[str]:
    return st.binary(min_size=32, max_size=32).map(bytes.hex)


def model_fingerprints(dtype: str | None = None) -> st.SearchStrategy[ModelFingerprint]:
    return st.builds(
        ModelFingerprint,
        model_type=st.sampled_from(MODEL_TYPES),
        config_hash=_hashes(),
        weights_hash=_hashes(),
        num_parameters=st.integers(1, 10**9),
        dtype=st.sampled_from(DTYPES) if dtype is None else st.just(dtype),
    )


def tokenizer_fingerprints() -> st.SearchStrategy[TokenizerFingerprint]:
    return st.builds(
        TokenizerFingerprint, name=st.sampled_from(("tiny", "gpt2")), vocab_size=st.integers(1, 10**6), hash=_hashes()
    )


def json_scalars() -> st.SearchStrategy[JSONScalar]:
    """Settings/environment values that survive the JSON form exactly (finite floats, bounded ints)."""
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**63), 2**63),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(_ALPHABET, max_size=12),
    )


_ENV_KEYS = ("torch", "transformers", "device", "cuda", "gpu", "threads", "dtype", "attn_implementation", "python")


def environments() -> st.SearchStrategy[dict[str, JSONScalar]]:
    keys = st.one_of(st.sampled_from(_ENV_KEYS), st.text(min_size=1, max_size=10))
    return st.dictionaries(keys, json_scalars(), max_size=5)


@st.composite
def traces(
    draw: st.DrawFn,
    *,
    max_prompts: int = 3,
    max_steps: int = 8,
    top_k: int | None = None,
    vocab_size: int = 16,
    allow_nan: bool = False,
    sorted_topk: bool = True,
    fingerprints: bool | None = None,
    dtype: str | None = None,
) -> GenerationTrace:
    """A valid random `GenerationTrace`.

    `top_k` None draws it (0..5) once per trace, as `record()` uses one k; `fingerprints` None draws whether model
    and tokenizer fingerprints are present; `dtype` fixes the model dtype. One vocabulary (id -> text) per trace.
    """
    k = draw(st.integers(0, 5)) if top_k is None else top_k
    vocab = draw(st.lists(token_texts(max_size=4), min_size=1, max_size=8))
    prompts = draw(
        st.lists(
            prompt_traces(
                max_steps=max_steps,
                top_k=k,
                vocab=vocab,
                vocab_size=vocab_size,
                allow_nan=allow_nan,
                sorted_topk=sorted_topk,
            ),
            max_size=max_prompts,
        )
    )
    with_fingerprints = draw(st.booleans()) if fingerprints is None else fingerprints
    settings: dict[str, JSONScalar] = {"max_new_tokens": max_steps, "top_k": k, "do_sample": draw(st.booleans())}
    if draw(st.booleans()):
        settings["temperature"] = draw(st.floats(0.1, 2.0))
    return GenerationTrace(
        prompts=tuple(prompts),
        settings=settings,
        model=draw(model_fingerprints(dtype)) if with_fingerprints else None,
        tokenizer=draw(tokenizer_fingerprints()) if with_fingerprints else None,
        environment=draw(environments()),
    )


# ---- model-input strategies

PROFILE = "genguard"
"""The hypothesis profile for tests that run a model (see `load_profile`)."""

_NON_ASCII_WORDS: tuple[str, ...] = ("café", "naïve", "über", "東京", "😀", "Ελλάδα", "ﬁne", "e\u0301", "\u200b")
"""Words whose bytes split into partial UTF-8 tokens in a byte-level BPE: decoding code must cope."""


def _register_profile() -> None:
    settings.register_profile(
        PROFILE,
        # A generate() call takes 10 ms to seconds depending on load: a deadline would only make tests flaky.
        deadline=None,
        # Each example runs a model: a few are enough to find a bad prompt or config, many make the suite slow.
        max_examples=20,
        # On CI (CI is set by GitHub Actions, GitLab, ...) every run draws the same examples, so a red build
        # reproduces locally with CI=1; elsewhere examples vary and the failure database replays failures.
        derandomize=bool(os.environ.get("CI")),
        # Model calls are slow by hypothesis' standards; that is expected, not a problem with the strategy.
        suppress_health_check=[HealthCheck.too_slow],
        print_blob=True,
    )


_register_profile()


def load_profile(name: str = PROFILE) -> None:
    """Make `name` (default: the "genguard" profile) hypothesis' active settings, e.g. in a conftest.py."""
    settings.load_profile(name)


def _corpus_words() -> list[str]:
    words = {w.strip(".,;:!?\"'") for text in corpus_texts() for w in text.split()}
    return sorted(w for w in words if w)


def prompts(tokenizer: Any, *, min_words: int = 1, max_words: int = 6, max_tokens: int = 32) -> st.SearchStrategy[str]:
    """Prompt texts: mostly words of the shipped corpus (which tiny models know), some arbitrary text including
    non-ASCII and whitespace oddities; each tokenizes to 1..`max_tokens` ids with `tokenizer`."""
    if not 1 <= min_words <= max_words:
        raise ValueError(f"prompts: need 1 <= min_words <= max_words, got {min_words}, {max_words}")
    known = st.sampled_from(_corpus_words())
    odd = st.one_of(
        st.sampled_from(_NON_ASCII_WORDS),
        st.text(st.characters(exclude_categories=("Cs", "Cc")), min_size=1, max_size=6),
    )
    word = st.one_of(known, known, known, odd)
    separator = st.sampled_from((" ", " ", " ", "  ", "\n", ", "))

    @st.composite
    def text(draw: st.DrawFn) -> str:
        words = draw(st.lists(word, min_size=min_words, max_size=max_words))
        out = words[0]
        for w in words[1:]:
            out += draw(separator) + w
        return out

    def fits(value: str) -> bool:
        return 1 <= len(tokenizer(value)["input_ids"]) <= max_tokens

    return text().filter(fits)


def generation_configs(
    *, max_new_tokens: int = 8, modes: Sequence[str] = ("greedy", "sample", "beam")
) -> st.SearchStrategy[dict[str, Any]]:
    """Keyword arguments for `record()`: `max_new_tokens` (1..`max_new_tokens`) and a decoding mode from `modes`.

    greedy: optional repetition_penalty, no_repeat_ngram_size, min_new_tokens; sample: `seed` plus a
    `generation_config` (a `GenerationConfig` with do_sample, temperature, top-k, top-p: the sampling top-k cannot be
    a keyword, `record()`'s own `top_k` is how many alternatives it records) and optional repetition_penalty;
    beam: num_beams 2-3 with optional length_penalty and no_repeat_ngram_size.
    """
    unknown = set(modes) - {"greedy", "sample", "beam"}
    if not modes or unknown:
        raise ValueError(f"generation_configs: modes must be some of 'greedy', 'sample', 'beam', got {modes!r}")
    if max_new_tokens < 1:
        raise ValueError(f"generation_configs: max_new_tokens must be >= 1, got {max_new_tokens}")
    return _generation_configs(max_new_tokens, tuple(modes))


@st.composite
def _generation_configs(draw: st.DrawFn, max_new_tokens: int, modes: tuple[str, ...]) -> dict[str, Any]:
    mode = draw(st.sampled_from(modes))
    n = draw(st.integers(1, max_new_tokens))
    kwargs: dict[str, Any] = {"max_new_tokens": n}
    penalty = st.sampled_from((1.1, 1.3, 2.0))
    if mode == "greedy":
        if draw(st.booleans()):
            kwargs["repetition_penalty"] = draw(penalty)
        if draw(st.booleans()):
            kwargs["no_repeat_ngram_size"] = draw(st.integers(1, 3))
        if draw(st.booleans()):
            kwargs["min_new_tokens"] = draw(st.integers(1, n))
    elif mode == "sample":
        from transformers import GenerationConfig  # only for sampling configs: torch-free strategies stay torch-free

        kwargs["seed"] = draw(st.integers(0, 2**16))
        kwargs["generation_config"] = GenerationConfig(
            do_sample=True,
            temperature=draw(st.sampled_from((0.5, 0.7, 1.0, 1.3))),
            top_k=draw(st.sampled_from((0, 1, 5, 50))),
            top_p=draw(st.sampled_from((0.8, 0.95, 1.0))),
        )
        if draw(st.booleans()):
            kwargs["repetition_penalty"] = draw(penalty)
    else:
        kwargs["num_beams"] = draw(st.integers(2, 3))
        if draw(st.booleans()):
            kwargs["length_penalty"] = draw(st.sampled_from((0.5, 1.0, 2.0)))
        if draw(st.booleans()):
            kwargs["no_repeat_ngram_size"] = draw(st.integers(2, 3))
    return kwargs
