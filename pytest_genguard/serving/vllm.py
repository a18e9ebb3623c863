"""vLLM's OpenAI-compatible server, mapped to what genguard needs (`protocol.ServerMapping`).

- probe: ``GET /version`` (its release), ``GET /v1/models`` (the served name, its root folder, ``max_model_len``),
  whether ``POST /tokenize`` answers. vLLM does not report the dtype it serves in.
- score (teacher forcing): ``POST /v1/completions`` with the prompt as token ids (the snapshot's prompt ids and
  path), ``max_tokens: 1`` and ``prompt_logprobs: K``: every position gets its token's logprob, rank and the top-K,
  keyed by token id, in one request.
- generate (the server's own decoding): ``temperature: 0``, ``logprobs: K`` and ``return_tokens_as_token_ids``.

A request for more logprobs than the server's ``--max-logprobs`` (default 20) is a 400 this module turns into an error
naming the flag; the same 400, for a one-token request of more than any vocabulary, tells the cap (`max_logprobs`).

A sampled snapshot's sampler (`sampler.py`): vLLM shows its processed distribution only when started with
``--logprobs-mode processed_logprobs``, and for generated tokens only (prompt logprobs are raw in every mode), so each
step is one request, the prefix as the prompt and ``max_tokens: 1``, with ``logprobs: N``: the top-N after penalties,
temperature, min-p, top-k and top-p (a removed token reads ``-9999.0``, vLLM's floor for ``-inf``). The mode is
checked once (`check_processed`: one token asked with top-k 1); a server giving raw logprobs is an error naming the
flag. vLLM's order (min-p before top-k and top-p) is no request field: `known_causes` names it from the settings.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_genguard.core.errors import ServerError
from pytest_genguard.core.jsontext import JSONScalar
from pytest_genguard.core.sampling import Cause, SamplerSettings, Served
from pytest_genguard.serving.http import Endpoint
from pytest_genguard.serving.protocol import Generated, SamplerApi, Scored, ServerInfo, ServerMapping

__all__ = [
    "VLLM",
    "check_processed",
    "completion_request",
    "distribution_request",
    "generation_request",
    "known_causes",
    "max_logprobs",
    "parse_distribution",
    "parse_generated",
    "parse_scored",
    "sampler_fields",
]

_CAP = re.compile(r"greater than max allowed: (\d+)")
_ID_KEY = re.compile(r"token_id:(-?\d+)$")


def probe(endpoint: Endpoint, model: str | None) -> ServerInfo:
    """What the server at `endpoint` serves; `model` None takes the one it serves (an error when it serves several)."""
    version = endpoint.try_get("/version")
    models = endpoint.get("/v1/models")
    data = models.get("data") if isinstance(models, dict) else None
    if not isinstance(data, list) or not all(isinstance(m, dict) and isinstance(m.get("id"), str) for m in data):
        raise ServerError(f"{endpoint.url}: GET /v1/models: no model list in the response ({str(models)[:200]})")
    served = [m["id"] for m in data]
    if model is None:
        if len(served) != 1:
            raise ServerError(
                f"{endpoint.url}: GET /v1/models: the server serves {len(served)} models ({', '.join(served)}); "
                "name one with --model"
            )
        model = served[0]
    if model not in served:
        raise ServerError(
            f"{endpoint.url}: GET /v1/models: model {model!r} is not served (it serves {', '.join(served) or 'none'}); "
            "pass one of those with --model, or start the server with the model"
        )
    entry = next(m for m in data if m["id"] == model)
    details: dict[str, JSONScalar] = {
        key: entry[key] for key in ("root", "max_model_len") if isinstance(entry.get(key), (str, int))
    }
    tokenize = _answers_tokenize(endpoint, model)
    return ServerInfo(
        engine="vllm",
        version=version.get("version") if isinstance(version, dict) else None,
        url=endpoint.url,
        model=model,
        details=details,
        tokenize=tokenize,
    )


def _answers_tokenize(endpoint: Endpoint, model: str) -> bool:
    """Whether ``POST /tokenize`` exists (vLLM serves it by POST only, so a GET says 405)."""
    try:
        endpoint.post("/tokenize", {"model": model, "prompt": "a"})
    except ServerError as exc:
        if getattr(exc.__cause__, "code", None) in (404, 405):
            return False
        raise
    return True


def tokenize(endpoint: Endpoint, info: ServerInfo, text: str, add_special: bool = True) -> tuple[int, ...]:
    """The ids the server's tokenizer gives `text` (`add_special`: special tokens added as for a completion
    prompt)."""
    doc = endpoint.post("/tokenize", {"model": info.model, "prompt": text, "add_special_tokens": add_special})
    tokens = doc.get("tokens") if isinstance(doc, dict) else None
    if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
        raise ServerError(f"{endpoint.url}: POST /tokenize: no token id list in the response ({str(doc)[:200]})")
    return tuple(tokens)


def completion_request(model: str, ids: Sequence[int], k: int) -> dict[str, Any]:
    """The one request that scores a whole token sequence: every position's logprob and top-`k`."""
    return {"model": model, "prompt": list(ids), "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": k}


def score(endpoint: Endpoint, info: ServerInfo, ids: Sequence[int], start: int, k: int) -> list[Scored]:
    """The server's logprob of each token of `ids` from position `start` on, with the top-`k` there."""
    body = completion_request(info.model, ids, k)
    doc = _post_completion(endpoint, body, k)
    return parse_scored(doc, ids, start, k, where=f"{endpoint.url}: POST /v1/completions")


def parse_scored(doc: Any, ids: Sequence[int], start: int, k: int, *, where: str) -> list[Scored]:
    """`score`'s mapping of a completions response: ``choices[0].prompt_logprobs``, one entry per prompt position
    (None at position 0), each ``{"<id>": {"logprob", "rank", "decoded_token"}}``: the top-k and the given token."""
    entries = _choice(doc, where).get("prompt_logprobs")
    if not isinstance(entries, list) or len(entries) != len(ids):
        have = len(entries) if isinstance(entries, list) else "no"
        raise ServerError(
            f"{where}: {have} prompt_logprobs entries for a prompt of {len(ids)} tokens; "
            "the server did not score the sequence as asked (does it support prompt_logprobs?)"
        )
    out = []
    for position in range(start, len(ids)):
        entry = entries[position]
        where_at = f"{where}: prompt_logprobs[{position}]"
        if not isinstance(entry, dict):
            raise ServerError(f"{where_at}: expected an object of token ids, found {str(entry)[:80]}")
        ranked = []
        for key, value in entry.items():
            if not isinstance(value, dict) or not isinstance(value.get("logprob"), (int, float)):
                raise ServerError(f"{where_at}: entry {key!r} has no numeric logprob ({str(value)[:80]})")
            ranked.append((_rank(value, where_at), _token_id(key, where_at), float(value["logprob"]), value))
        ranked.sort(key=lambda r: (r[0], -r[2], r[1]))
        top = tuple((tid, lp) for rank, tid, lp, _ in ranked if rank <= k)[:k]
        given = next((r for r in ranked if r[1] == ids[position]), None)
        if given is None or len(top) < k:
            missing = "the given token" if given is None else f"{len(top)} of the {k} top logprobs"
            raise ServerError(f"{where_at}: the response lacks {missing} (a short response)")
        text = given[3].get("decoded_token")
        out.append(Scored(ids[position], given[2], top, text if isinstance(text, str) else None))
    return out


def generation_request(model: str, prompt_ids: Sequence[int], max_tokens: int, k: int) -> dict[str, Any]:
    """The request that lets the server decode greedily, reporting each chosen token's id and the top-`k`."""
    return {
        "model": model,
        "prompt": list(prompt_ids),
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "logprobs": k,
        "return_tokens_as_token_ids": True,
        "skip_special_tokens": False,
    }


def generate(endpoint: Endpoint, info: ServerInfo, prompt_ids: Sequence[int], max_tokens: int, k: int) -> Generated:
    """The server's own greedy decoding of `prompt_ids`, scored."""
    doc = _post_completion(endpoint, generation_request(info.model, prompt_ids, max_tokens, k), k)
    return parse_generated(doc, k, where=f"{endpoint.url}: POST /v1/completions")


def parse_generated(doc: Any, k: int, *, where: str) -> Generated:
    """`generate`'s mapping: ``choices[0].logprobs`` (``tokens`` as ``token_id:N``, ``token_logprobs``,
    ``top_logprobs``) and ``finish_reason`` ("stop": an end token; "length": max_tokens)."""
    choice = _choice(doc, where)
    logprobs = choice.get("logprobs")
    if not isinstance(logprobs, dict):
        raise ServerError(f"{where}: no logprobs in the response (were logprobs asked for?)")
    tokens, values, tops = logprobs.get("tokens"), logprobs.get("token_logprobs"), logprobs.get("top_logprobs")
    if not (isinstance(tokens, list) and isinstance(values, list) and isinstance(tops, list)) or not (
        len(tokens) == len(values) == len(tops)
    ):
        raise ServerError(f"{where}: logprobs.tokens/token_logprobs/top_logprobs missing or of unequal lengths")
    steps = []
    for t, (token, value, top) in enumerate(zip(tokens, values, tops, strict=True)):
        where_at = f"{where}: logprobs step {t}"
        if not isinstance(top, dict) or not isinstance(value, (int, float)):
            raise ServerError(f"{where_at}: malformed ({str(top)[:80]})")
        ranked = sorted(((float(lp), _token_id(key, where_at)) for key, lp in top.items()), key=lambda r: -r[0])
        if len(ranked) < k:
            raise ServerError(f"{where_at}: {len(ranked)} of the {k} top logprobs (a short response)")
        pairs = tuple((tid, lp) for lp, tid in ranked[:k])
        steps.append(Scored(_token_id(str(token), where_at), float(value), pairs))
    finish = choice.get("finish_reason")
    return Generated(tuple(steps), "eos" if finish == "stop" else "length")


def _post_completion(endpoint: Endpoint, body: dict[str, Any], k: int) -> Any:
    try:
        return endpoint.post("/v1/completions", body)
    except ServerError as exc:
        cap = _CAP.search(str(exc))
        if cap:
            raise ServerError(
                f"{exc}\n{endpoint.url} caps logprobs at {cap.group(1)}, below the snapshot's top-{k}: restart the "
                f"server with --max-logprobs {k} (or more)"
            ) from exc
        raise


def _choice(doc: Any, where: str) -> dict[str, Any]:
    choices = doc.get("choices") if isinstance(doc, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ServerError(f"{where}: no choices in the response ({str(doc)[:200]})")
    return choices[0]


def _rank(value: dict[str, Any], where: str) -> int:
    rank = value.get("rank")
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise ServerError(f"{where}: a token without a rank ({str(value)[:80]})")
    return rank


def _token_id(key: str, where: str) -> int:
    match = _ID_KEY.match(key)
    text = match.group(1) if match else key
    try:
        return int(text)
    except ValueError:
        raise ServerError(f"{where}: {key!r} is not a token id (are tokens returned as ids?)") from None


_PROBE_LOGPROBS = 1 << 20  # more than any vocabulary: the server answers with its cap


def max_logprobs(endpoint: Endpoint, info: ServerInfo, token_id: int) -> int | None:
    """The server's ``--max-logprobs`` (the most logprobs per position it returns), read from the 400 it answers a
    one-token request for more than any vocabulary (nothing to score there, so the probe is cheap); None when it
    accepts (no cap) or refuses without naming one."""
    try:
        endpoint.post("/v1/completions", completion_request(info.model, [token_id], _PROBE_LOGPROBS))
    except ServerError as exc:
        cap = _CAP.search(str(exc))
        if cap:
            return int(cap.group(1))
        if getattr(exc.__cause__, "code", None) == 400:
            return None
        raise
    return None


def reset_prefix_cache(endpoint: Endpoint) -> bool:
    """Empty the server's prefix cache (``POST /reset_prefix_cache``, served only with ``VLLM_SERVER_DEV_MODE=1``);
    False when the server does not offer it."""
    try:
        endpoint.post_raw("/reset_prefix_cache")
    except ServerError as exc:
        if getattr(exc.__cause__, "code", None) in (404, 405):
            return False
        raise
    return True


_FLOOR = -9999.0  # what vLLM's OpenAI responses write for a logprob of -inf (a token its sampler removed)


def sampler_fields(sampler: SamplerSettings, prefix_length: int) -> dict[str, Any]:
    """The snapshot's settings as vLLM's sampling parameters; `ValueError` for typical-p, which vLLM has not."""
    if sampler.typical_p < 1.0:
        raise ValueError(f"the snapshot's typical_p {sampler.typical_p:g} has no vLLM sampling parameter")
    return {
        "temperature": sampler.temperature,
        "top_k": sampler.top_k,  # 0: off
        "top_p": sampler.top_p,
        "min_p": sampler.min_p,
        "repetition_penalty": sampler.repetition_penalty,  # over the prompt and the output, as transformers'
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
    }


def distribution_request(model: str, prefix_ids: Sequence[int], fields: Mapping[str, Any], n: int) -> dict[str, Any]:
    """One step of a sampled path: the prefix as the prompt, one token, its top-`n` processed logprobs."""
    return {
        **fields,
        "model": model,
        "prompt": list(prefix_ids),
        "max_tokens": 1,
        "logprobs": n,
        "return_tokens_as_token_ids": True,
        "skip_special_tokens": False,
        "seed": 0,
    }


def distribution(
    endpoint: Endpoint, info: ServerInfo, prefix_ids: Sequence[int], fields: Mapping[str, Any], n: int
) -> Served:
    """vLLM's processed probabilities for the token after `prefix_ids`, its top `n` (the server must run in a
    processed logprobs mode: `check_processed`)."""
    doc = _post_completion(endpoint, distribution_request(info.model, prefix_ids, fields, n), n)
    return parse_distribution(doc, n, where=f"{endpoint.url}: POST /v1/completions")


def parse_distribution(doc: Any, n: int, *, where: str) -> Served:
    """`distribution`'s mapping: ``choices[0].logprobs.top_logprobs[0]`` (``token_id:N`` -> processed logprob; a
    removed token at vLLM's floor). A removed token among them, or fewer than `n`, means the list is the whole
    support."""
    logprobs = _choice(doc, where).get("logprobs")
    tops = logprobs.get("top_logprobs") if isinstance(logprobs, dict) else None
    if not isinstance(tops, list) or not tops or not isinstance(tops[0], dict):
        raise ServerError(f"{where}: no logprobs.top_logprobs in the response (were logprobs asked for?)")
    kept: list[tuple[int, float]] = []
    removed = 0
    for key, value in tops[0].items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ServerError(f"{where}: {key!r} has no numeric logprob ({str(value)[:80]})")
        if value <= _FLOOR or not math.isfinite(value):
            removed += 1
        else:
            kept.append((_token_id(key, where), math.exp(value)))
    kept.sort(key=lambda e: -e[1])
    return Served(tuple(kept), complete=removed > 0 or len(kept) < n)


def check_processed(endpoint: Endpoint, info: ServerInfo) -> None:
    """`ServerError` naming ``--logprobs-mode processed_logprobs`` unless the server's logprobs are processed ones:
    one token asked with top-k 1 comes back with logprob 0 and the runner-up removed only then."""
    fields = {"temperature": 1.0, "top_k": 1, "top_p": 1.0, "min_p": 0.0}
    doc = _post_completion(endpoint, distribution_request(info.model, [0], fields, 2), 2)
    logprobs = _choice(doc, f"{endpoint.url}: POST /v1/completions").get("logprobs")
    tops = logprobs.get("top_logprobs") if isinstance(logprobs, dict) else None
    values = sorted(tops[0].values(), reverse=True) if isinstance(tops, list) and tops and tops[0] else []
    if len(values) >= 2 and abs(values[0]) < 1e-6 and values[1] <= _FLOOR:
        return
    raise ServerError(
        f"{endpoint.url}: vLLM returns raw logprobs (--logprobs-mode raw_logprobs, its default; asked one token with "
        f"top_k 1, its logprobs read {values[:2]}): a sampled snapshot's sampler is judged on the distribution after "
        "vLLM's sampler; restart the server with --logprobs-mode processed_logprobs (teacher forcing is the same in "
        "either mode: prompt logprobs are raw)"
    )


def known_causes(sampler: SamplerSettings) -> tuple[Cause, ...]:
    """The differences vLLM's order makes for these settings, no request field changing it."""
    if sampler.min_p > 0.0 and sampler.top_p < 1.0:
        return (
            Cause(
                "min-p before top-p",
                "vLLM applies min_p before top_k and top_p (v1/sample/sampler.py), transformers top_p first and min_p "
                "on what it kept",
                "no request field changes vLLM's order: judge snapshots recorded with one of min_p and top_p",
            ),
        )
    return ()


def _cap(endpoint: Endpoint, info: ServerInfo) -> int | None:
    return max_logprobs(endpoint, info, 0)


VLLM_SAMPLER = SamplerApi(
    fields=sampler_fields,
    distribution=distribution,
    check=check_processed,
    known=known_causes,
    cap=_cap,
)
"""vLLM's sampler: its processed logprobs mode, capped by ``--max-logprobs``."""


VLLM = ServerMapping(
    name="vllm",
    probe=probe,
    tokenize=tokenize,
    score=score,
    generate=generate,
    reset_cache=reset_prefix_cache,
    max_logprobs=max_logprobs,
    sampler=VLLM_SAMPLER,
)
"""vLLM's mapping: teacher forcing through ``prompt_logprobs``."""
