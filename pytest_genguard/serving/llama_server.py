"""llama.cpp's own server (``llama-server``), mapped to what genguard needs (`protocol.ServerMapping`).

llama-server cannot score a given sequence: it rejects ``echo`` ("Only no echo is supported"; prompt logprobs are an
open request, llama.cpp #27174). So it is judged *regenerated*: its own greedy decoding of the snapshot's prompt ids,
with the pre-sampling top logprobs of each generated token by id, compared as a new trace.

- probe: ``GET /props`` (``build_info``: its build, ``model_path``, ``model_ftype``: the GGUF's file type, "all F32"
  read as float32) and ``GET /v1/models`` (the served name: ``--alias``, else the file's path; ``meta.n_vocab``).
- tokenize: ``POST /tokenize`` (``content``, ``add_special``, ``parse_special``): a prompt text gets the special
  tokens a completion prompt gets (BOS when the GGUF says so), a rendered conversation none (its template wrote them).
- render: ``POST /apply-template``: the GGUF's embedded chat template as the server applies it to a conversation,
  against the text the snapshot recorded (another template is stale, named).
- generate: ``POST /completion`` with the prompt as token ids, ``temperature: 0``, ``n_probs: K`` (pre-sampling
  probabilities: the softmax of the raw logits, so ``logprob`` is the raw log-softmax), ``return_tokens`` and no
  prompt cache (each request computes its prompt, as the snapshot's run did).

A sampled snapshot's sampler (`sampler.py`): ``POST /completion`` with the prefix as the prompt, ``n_predict: 1``,
``post_sampling_probs: true`` and ``n_probs: N`` gives the probabilities after its sampler chain (its candidates
after the chain, largest first; fewer than N when it kept fewer). The snapshot's settings go to their fields
(`sampler_fields`, every sampler transformers lacks off: llama-server's defaults keep top-k 40 and min-p 0.05); its
order and penalty window stay the server's unless aligned (`ALIGNMENTS`: ``samplers`` in transformers' order,
``repeat_last_n`` over the whole sequence).

Its logprobs are ``log(p)`` of float32 probabilities normalized by a float32 sum over the vocabulary: a step's
logprobs all carry the rounding of that one sum (up to ``n_vocab`` * 2^-23; 1e-4 measured on SmolLM2's 49,152
tokens), which the comparison rule allows on the chosen token's logprob while it judges the top-k as gaps to it
(`core.environments.NORMALIZER_FIELD`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import PurePath
from typing import Any

from pytest_genguard.core.errors import ServerError
from pytest_genguard.core.jsontext import JSONScalar
from pytest_genguard.core.sampling import Cause, SamplerSettings, Served
from pytest_genguard.serving.http import Endpoint
from pytest_genguard.serving.protocol import Alignment, Generated, SamplerApi, Scored, ServerInfo, ServerMapping

__all__ = [
    "ALIGNMENTS",
    "LLAMA_SERVER",
    "TRANSFORMERS_ORDER",
    "distribution_request",
    "generation_request",
    "is_llama_server",
    "parse_distribution",
    "parse_generated",
    "probe",
    "sampler_fields",
]

_STOPS = {"eos": "eos", "limit": "length"}
"""llama-server's ``stop_type`` -> genguard's finish reason (``word``: a stop string, which genguard never sends)."""


def is_llama_server(props: Any) -> bool:
    """Whether a ``GET /props`` answer is llama-server's (vLLM has no such route)."""
    return isinstance(props, dict) and ("build_info" in props or "default_generation_settings" in props)


def probe(endpoint: Endpoint, model: str | None) -> ServerInfo:
    """What the llama-server at `endpoint` serves; `model`, when given, must be the name it serves."""
    props = endpoint.get("/props")
    if not is_llama_server(props):
        raise ServerError(
            f"{endpoint.url}: GET /props: not llama-server's answer ({str(props)[:200]}); is this llama.cpp's "
            "llama-server? (--server vllm for a vLLM server)"
        )
    models = endpoint.try_get("/v1/models")
    data = models.get("data") if isinstance(models, dict) else None
    served = [m["id"] for m in data or [] if isinstance(m, dict) and isinstance(m.get("id"), str)]
    metas = [m["meta"] for m in data or [] if isinstance(m, dict) and isinstance(m.get("meta"), dict)]
    n_vocab = metas[0].get("n_vocab") if metas else None
    if isinstance(n_vocab, bool) or not isinstance(n_vocab, int) or n_vocab <= 0:
        raise ServerError(
            f"{endpoint.url}: GET /v1/models: no vocabulary size (meta.n_vocab) in the answer ({str(models)[:200]}): "
            "genguard needs it to bound the rounding of llama-server's logprobs"
        )
    path = props.get("model_path")
    name = served[0] if served else (str(path) if isinstance(path, str) else "model")
    if model is not None and model not in (name, *served):
        raise ServerError(
            f"{endpoint.url}: model {model!r} is not served (llama-server serves {name!r}); pass --model {name!r}, "
            "or start llama-server with the model"
        )
    details: dict[str, JSONScalar] = {}
    if isinstance(path, str):
        details["gguf"] = PurePath(path).name
    settings = props.get("default_generation_settings")
    n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
    if isinstance(n_ctx, int):
        details["n_ctx"] = n_ctx
    ftype = props.get("model_ftype")
    if isinstance(ftype, str):
        details["gguf_file_type"] = ftype
    build = props.get("build_info")
    return ServerInfo(
        engine="llama.cpp",
        version=build if isinstance(build, str) else None,
        url=endpoint.url,
        model=name,
        details=details,
        tokenize=True,
        # an F32 file computes in float32 throughout; other types keep float32 logits of rounded weights: inferred
        dtype="float32" if ftype == "all F32" else None,
        normalizer_terms=n_vocab,
    )


def tokenize(endpoint: Endpoint, info: ServerInfo, text: str, add_special: bool = True) -> tuple[int, ...]:
    """The ids llama-server's tokenizer (the GGUF's) gives `text`, special tokens parsed; `add_special` adds BOS
    where the GGUF asks for it."""
    doc = endpoint.post("/tokenize", {"content": text, "add_special": add_special, "parse_special": True})
    tokens = doc.get("tokens") if isinstance(doc, dict) else None
    if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
        raise ServerError(f"{endpoint.url}: POST /tokenize: no token id list in the response ({str(doc)[:200]})")
    return tuple(tokens)


def render(
    endpoint: Endpoint, info: ServerInfo, messages: Sequence[Mapping[str, Any]], kwargs: Mapping[str, Any]
) -> str:
    """The text llama-server's chat template (the GGUF's embedded one) makes of a conversation, with the generation
    prompt, as a chat completion would send it."""
    body: dict[str, Any] = {"messages": [dict(m) for m in messages]}
    if kwargs:
        body["chat_template_kwargs"] = dict(kwargs)
    doc = endpoint.post("/apply-template", body)
    prompt = doc.get("prompt") if isinstance(doc, dict) else None
    if not isinstance(prompt, str):
        raise ServerError(f"{endpoint.url}: POST /apply-template: no prompt in the response ({str(doc)[:200]})")
    return prompt


def generation_request(prompt_ids: Sequence[int], max_tokens: int, k: int) -> dict[str, Any]:
    """The request that lets llama-server decode greedily, reporting each chosen token's id and the top-`k` of the
    raw logits."""
    return {
        "prompt": list(prompt_ids),
        "n_predict": max_tokens,
        "temperature": 0.0,
        "n_probs": k,
        "post_sampling_probs": False,
        "return_tokens": True,
        "cache_prompt": False,
    }


def generate(endpoint: Endpoint, info: ServerInfo, prompt_ids: Sequence[int], max_tokens: int, k: int) -> Generated:
    """llama-server's own greedy decoding of `prompt_ids`, scored."""
    doc = endpoint.post("/completion", generation_request(prompt_ids, max_tokens, k))
    return parse_generated(doc, k, where=f"{endpoint.url}: POST /completion")


def _logprob(entry: Mapping[str, Any], where: str) -> tuple[int, float]:
    token_id, value = entry.get("id"), entry.get("logprob")
    if isinstance(token_id, bool) or not isinstance(token_id, int):
        raise ServerError(f"{where}: an entry without a token id ({str(entry)[:80]})")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ServerError(f"{where}: token {token_id} has no numeric logprob ({str(entry)[:80]})")
    return token_id, float(value) if math.isfinite(float(value)) else -math.inf  # log(0): -inf, however written


def parse_generated(doc: Any, k: int, *, where: str) -> Generated:
    """`generate`'s mapping: ``completion_probabilities`` (each generated token's ``id``, ``logprob`` and
    ``top_logprobs`` by id) and ``stop_type`` ("eos": an end token; "limit": n_predict)."""
    entries = doc.get("completion_probabilities") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise ServerError(f"{where}: no completion_probabilities in the response (n_probs unsent?) ({str(doc)[:160]})")
    steps = []
    for t, entry in enumerate(entries):
        where_at = f"{where}: completion_probabilities[{t}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("top_logprobs"), list):
            raise ServerError(f"{where_at}: malformed, expected id, logprob and top_logprobs ({str(entry)[:80]})")
        token_id, value = _logprob(entry, where_at)
        top = [_logprob(e, where_at) if isinstance(e, dict) else (-1, math.nan) for e in entry["top_logprobs"]]
        if len(top) < k or any(tid < 0 for tid, _ in top):
            raise ServerError(f"{where_at}: {len(top)} of the {k} top logprobs (a short or malformed response)")
        ranked = tuple(sorted(top, key=lambda r: -r[1])[:k])
        text = entry.get("token")
        steps.append(Scored(token_id, value, ranked, text if isinstance(text, str) else None))
    stop = doc.get("stop_type")
    if stop not in _STOPS:
        raise ServerError(
            f"{where}: stop_type {stop!r}: genguard sends no stop strings, so it expects 'eos' or 'limit'"
        )
    return Generated(tuple(steps), _STOPS[stop])


_OFF: dict[str, Any] = {
    "dynatemp_range": 0.0,
    "mirostat": 0,
    "dry_multiplier": 0.0,
    "xtc_probability": 0.0,
    "top_n_sigma": -1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
}
"""llama.cpp's samplers transformers does not have, off (a server started with them on would apply them)."""

TRANSFORMERS_ORDER = ("penalties", "temperature", "top_k", "top_p", "min_p", "typ_p")
"""transformers' processor order in llama.cpp's sampler names (its default chain: penalties; dry; top_n_sigma; top_k;
typ_p; top_p; min_p; xtc; temperature: temperature last)."""


def sampler_fields(sampler: SamplerSettings, prefix_length: int) -> dict[str, Any]:
    """The snapshot's settings as llama-server's request fields (values only: the order and the penalty window are
    the server's unless aligned)."""
    return {
        "temperature": sampler.temperature,
        "top_k": sampler.top_k,
        "top_p": sampler.top_p,
        "min_p": sampler.min_p,
        "typical_p": sampler.typical_p,
        "repeat_penalty": sampler.repetition_penalty,
        **_OFF,
    }


def _order_differs(sampler: SamplerSettings) -> bool:
    """Whether llama.cpp's default order gives another distribution for these settings: temperature before or after
    a cut by probability (top-p, min-p, typical-p), or typical-p before top-p and min-p (top-k commutes with both)."""
    cuts = sampler.top_p < 1.0 or sampler.min_p > 0.0 or sampler.typical_p < 1.0
    typical_first = sampler.typical_p < 1.0 and (sampler.top_p < 1.0 or sampler.min_p > 0.0)
    return (sampler.temperature != 1.0 and cuts) or typical_first


ALIGNMENTS = (
    Alignment(
        "samplers",
        Cause(
            "sampler order",
            "llama.cpp applies temperature after top-k, top-p and min-p (its default sampler order: penalties; dry; "
            "top_n_sigma; top_k; typ_p; top_p; min_p; xtc; temperature), transformers applies it first",
            f"pass samplers {list(TRANSFORMERS_ORDER)} in the request (check-server --align-sampler and "
            f"--genguard-server-align-sampler send it) or start llama-server with --samplers "
            f"'{';'.join(TRANSFORMERS_ORDER)}'",
        ),
        _order_differs,
        lambda sampler, length: {"samplers": list(TRANSFORMERS_ORDER)},
    ),
    Alignment(
        "repeat_last_n",
        Cause(
            "penalty window",
            "llama.cpp's repetition penalty covers the last 64 tokens (repeat_last_n), transformers' the whole "
            "sequence, prompt included",
            "pass repeat_last_n of at least the sequence's length in the request (check-server --align-sampler and "
            "--genguard-server-align-sampler send it) or start llama-server with --repeat-last-n N (N at least the "
            "longest prompt and path)",
        ),
        lambda sampler: sampler.repetition_penalty != 1.0,
        lambda sampler, length: {"repeat_last_n": length},
    ),
)
"""The request fields that give llama-server transformers' semantics where the settings alone do not."""


def distribution_request(prefix_ids: Sequence[int], fields: Mapping[str, Any], n: int) -> dict[str, Any]:
    """One step of a sampled path: the prefix as the prompt, one token, the top-`n` probabilities after the sampler
    chain. The prompt cache is on: the next step's prefix extends this one, as generate()'s KV cache does."""
    return {
        **fields,
        "prompt": list(prefix_ids),
        "n_predict": 1,
        "n_probs": n,
        "post_sampling_probs": True,
        "return_tokens": True,
        "cache_prompt": True,
        "seed": 0,
    }


def distribution(
    endpoint: Endpoint, info: ServerInfo, prefix_ids: Sequence[int], fields: Mapping[str, Any], n: int
) -> Served:
    """llama-server's probabilities after its sampler chain for the token after `prefix_ids`, its top `n`."""
    doc = endpoint.post("/completion", distribution_request(prefix_ids, fields, n))
    return parse_distribution(doc, n, info.normalizer_terms, where=f"{endpoint.url}: POST /completion")


def parse_distribution(doc: Any, n: int, vocab: int | None, *, where: str) -> Served:
    """`distribution`'s mapping: ``completion_probabilities[0].top_probs``, each ``id`` and ``prob``, largest first;
    fewer than `n` (or the whole vocabulary) is the whole support (llama-server lists its candidates after the chain
    and stops at a zero probability)."""
    entries = doc.get("completion_probabilities") if isinstance(doc, dict) else None
    first = entries[0] if isinstance(entries, list) and entries else None
    top = first.get("top_probs") if isinstance(first, dict) else None
    if not isinstance(top, list):
        raise ServerError(
            f"{where}: no completion_probabilities[0].top_probs in the response (a llama-server without "
            f"post_sampling_probs?) ({str(doc)[:160]})"
        )
    out: list[tuple[int, float]] = []
    for entry in top:
        token_id = entry.get("id") if isinstance(entry, dict) else None
        prob = entry.get("prob") if isinstance(entry, dict) else None
        if isinstance(token_id, bool) or not isinstance(token_id, int) or not isinstance(prob, (int, float)):
            raise ServerError(f"{where}: a top_probs entry without id and prob ({str(entry)[:80]})")
        if prob > 0:
            out.append((token_id, float(prob)))
    out.sort(key=lambda e: -e[1])
    return Served(tuple(out), complete=len(out) < n or (vocab is not None and len(out) >= vocab))


LLAMA_SAMPLER = SamplerApi(fields=sampler_fields, distribution=distribution, alignments=ALIGNMENTS)
"""llama-server's sampler: ``post_sampling_probs``, no cap on ``n_probs``."""


LLAMA_SERVER = ServerMapping(
    name="llama.cpp",
    probe=probe,
    tokenize=tokenize,
    score=None,
    generate=generate,
    render=render,
    sampler=LLAMA_SAMPLER,
)
"""llama-server's mapping: regenerated (it cannot score a given sequence), with its chat template checked."""
