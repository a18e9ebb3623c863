"""Pure-Python models of two samplers over made-up logits, for the fast tests of the sampler rule and its server
plumbing: transformers' processors (repetition penalty over the whole sequence, then temperature, top-k, top-p,
min-p) and llama.cpp's chain (penalties over its last `repeat_last_n` tokens; by default top-k, top-p and min-p on the
untempered logits and temperature last, or any order its ``samplers`` field names). The real samplers are judged in
tests/engines/test_llama_server_sampler.py and tests/serving/test_vllm_sampler.py; these make the plumbing's tests
cheap and their negative controls exact."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

from pytest_genguard.core.jsontext import float32
from pytest_genguard.core.sampling import SamplerSettings
from pytest_genguard.core.trace import GenerationTrace, PromptTrace, Step, Support, TokenizerFingerprint

VOCAB = 400
LLAMA_DEFAULT = ("penalties", "top_k", "top_p", "min_p", "temperature")


def logits_for(prefix: Sequence[int], vocab: int = VOCAB) -> list[float]:
    """The made-up model: logits drawn from a seed of the prefix's length and last token, so every step of a path has
    its own and what lies further back changes nothing (but a penalty's window)."""
    rng = random.Random(len(prefix) * 100_003 + (prefix[-1] if prefix else 0))
    return [rng.gauss(0.0, 2.0) for _ in range(vocab)]


def softmax(scores: Sequence[float]) -> list[float]:
    top = max(s for s in scores if s > -math.inf)
    exps = [math.exp(s - top) if s > -math.inf else 0.0 for s in scores]
    total = sum(exps)
    return [e / total for e in exps]


def _penalized(scores: list[float], seen: set[int], penalty: float) -> list[float]:
    return [(s * penalty if s < 0 else s / penalty) if i in seen else s for i, s in enumerate(scores)]


def _top_k(scores: list[float], k: int) -> list[float]:
    if k <= 0 or k >= len(scores):
        return scores
    floor = sorted(scores, reverse=True)[k - 1]
    return [s if s >= floor else -math.inf for s in scores]


def _top_p(scores: list[float], p: float) -> list[float]:
    if p >= 1.0:
        return scores
    probs = softmax(scores)
    kept, mass = set(), 0.0
    for i in sorted(range(len(scores)), key=lambda i: -probs[i]):
        kept.add(i)
        mass += probs[i]
        if mass >= p:
            break
    return [s if i in kept else -math.inf for i, s in enumerate(scores)]


def _min_p(scores: list[float], m: float) -> list[float]:
    if m <= 0.0:
        return scores
    probs = softmax(scores)
    floor = m * max(probs)
    return [s if probs[i] >= floor else -math.inf for i, s in enumerate(scores)]


def chain(
    logits: Sequence[float],
    sampler: SamplerSettings,
    context: Sequence[int],
    order: Sequence[str] = ("penalties", "temperature", "top_k", "top_p", "min_p"),
    window: int | None = None,
) -> list[float]:
    """The probabilities after a sampler chain in `order`; the penalty over the last `window` tokens of `context`
    (None: all of it, as transformers)."""
    scores = list(logits)
    seen = set(context if window is None else context[-window:] if window > 0 else ())
    for name in order:
        if name == "penalties" and sampler.repetition_penalty != 1.0:
            scores = _penalized(scores, seen, sampler.repetition_penalty)
        elif name == "temperature":
            scores = [s / sampler.temperature for s in scores]
        elif name == "top_k":
            scores = _top_k(scores, sampler.top_k)
        elif name == "top_p":
            scores = _top_p(scores, sampler.top_p)
        elif name == "min_p":
            scores = _min_p(scores, sampler.min_p)
    return softmax(scores)


def snapshot(prompts: Sequence[Sequence[int]], settings: dict[str, Any], steps: int = 3, k: int = 5) -> GenerationTrace:
    """A sampled snapshot of the made-up model, as `record()` would store it: each step's support (no
    near-threshold tokens) and its top-`k` processed probabilities; the path takes each step's most probable token."""
    sampler = SamplerSettings.of({"do_sample": True, **settings})
    assert sampler is not None
    traces = []
    for prompt in prompts:
        path: list[Step] = []
        ids = list(prompt)
        for _ in range(steps):
            logits = logits_for(ids)
            probs = chain(logits, sampler, ids)
            raw = softmax(logits)
            top = sorted(range(VOCAB), key=lambda i: -raw[i])[:k]
            kept = sum(1 for p in probs if p > 0)
            chosen = max(range(VOCAB), key=lambda i: probs[i])
            lse = math.log(sum(math.exp(v) for v in logits))
            path.append(
                Step(
                    chosen,
                    f"t{chosen}",
                    float32(math.log(raw[chosen])),
                    float32(math.log(probs[chosen])),
                    tuple(top),
                    tuple(float32(math.log(raw[i])) for i in top),
                    lse=float32(lse),
                    support=Support(kept, tuple(float32(probs[i]) for i in top), kept, kept),
                )
            )
            ids.append(chosen)
        traces.append(PromptTrace(" ".join(map(str, prompt)), tuple(prompt), tuple(path), "length"))
    full = {"do_sample": True, "max_new_tokens": steps, "record_top_k": k, "seed": 0, "mode": "sample", **settings}
    return GenerationTrace(
        prompts=tuple(traces),
        settings=full,
        tokenizer=TokenizerFingerprint("made-up", VOCAB, "0" * 64),
        environment={"dtype": "float32"},
    )


def fake_llama_server(noise: float = 0.0) -> Any:
    """A `replay_server.Replay` that answers as llama-server does, its sampler being `chain` over `logits_for`: the
    request's ``samplers`` order (default: llama.cpp's, temperature last) and its ``repeat_last_n`` window (default
    64); `noise` moves each logit by that much at most (a server whose logits are rounded otherwise: an f16 KV cache).
    Every request is logged in ``.requests``."""
    from replay_server import Replay, Reply

    r = Replay()
    r.routes[("GET", "/props")] = Reply(200, {"build_info": "b0-fake", "model_path": "/m/fake.gguf"})
    r.routes[("GET", "/v1/models")] = Reply(200, {"data": [{"id": "fake", "meta": {"n_vocab": VOCAB}}]})

    def tokenize(body: Any) -> Reply:
        return Reply(200, {"tokens": [int(t) for t in body["content"].split()]})

    def complete(body: Any) -> Reply:
        ids = list(body["prompt"])
        sampler = SamplerSettings(
            temperature=body["temperature"],
            top_k=body["top_k"],
            top_p=body["top_p"],
            min_p=body["min_p"],
            repetition_penalty=body["repeat_penalty"],
        )
        order = tuple(body.get("samplers", LLAMA_DEFAULT))
        rng = random.Random(len(ids))
        logits = [v + noise * rng.uniform(-1.0, 1.0) for v in logits_for(ids)]
        probs = chain(logits, sampler, ids, order=order, window=body.get("repeat_last_n", 64))
        ranked = sorted(((i, p) for i, p in enumerate(probs) if p > 0), key=lambda e: -e[1])[: body["n_probs"]]
        top = [{"id": i, "token": f"t{i}", "prob": p} for i, p in ranked]
        entry = {"id": ranked[0][0], "token": f"t{ranked[0][0]}", "prob": ranked[0][1], "top_probs": top}
        return Reply(200, {"completion_probabilities": [entry], "stop_type": "limit", "content": ""})

    r.routes[("POST", "/tokenize")] = tokenize
    r.routes[("POST", "/completion")] = complete
    return r


def fake_vllm(processed: bool = True) -> Any:
    """A `replay_server.Replay` that answers vLLM's sampler requests as vLLM 0.32 computes them (penalties,
    temperature, min-p, top-k, top-p), in its processed logprobs mode (a removed token at -9999.0) or its raw one;
    its teacher forcing (``prompt_logprobs``) is the made-up model's raw log-softmax."""
    from replay_server import Replay, Reply

    r = Replay()
    r.routes[("GET", "/version")] = Reply(200, {"version": "0.32.0"})
    r.routes[("GET", "/v1/models")] = Reply(200, {"data": [{"id": "fake", "root": "/m", "max_model_len": 256}]})

    def tokenize(body: Any) -> Reply:
        return Reply(200, {"tokens": [int(t) for t in body["prompt"].split()] if body["prompt"] != "a" else [1]})

    def complete(body: Any) -> Reply:
        ids = list(body["prompt"])
        if "prompt_logprobs" in body:  # teacher forcing: every position's raw logprobs
            entries: list[Any] = [None]
            for p in range(1, len(ids)):
                raw = softmax(logits_for(ids[:p]))
                ranked = sorted(range(VOCAB), key=lambda i: -raw[i])
                keep = set(ranked[: body["prompt_logprobs"]]) | {ids[p]}
                entries.append({str(i): {"logprob": math.log(raw[i]), "rank": ranked.index(i) + 1} for i in keep})
            return Reply(200, {"choices": [{"prompt_logprobs": entries}]})
        sampler = SamplerSettings(
            temperature=body["temperature"],
            top_k=body["top_k"],
            top_p=body["top_p"],
            min_p=body["min_p"],
            repetition_penalty=body.get("repetition_penalty", 1.0),
        )
        order = ("penalties", "temperature", "min_p", "top_k", "top_p")
        probs = chain(logits_for(ids), sampler, ids, order=order) if processed else softmax(logits_for(ids))
        ranked = sorted(range(VOCAB), key=lambda i: -probs[i])[: body["logprobs"]]
        top = {f"token_id:{i}": math.log(probs[i]) if probs[i] > 0 else -9999.0 for i in ranked}
        return Reply(200, {"choices": [{"logprobs": {"top_logprobs": [top]}, "finish_reason": "length"}]})

    r.routes[("POST", "/tokenize")] = tokenize
    r.routes[("POST", "/v1/completions")] = complete
    return r
