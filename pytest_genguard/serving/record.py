"""A reference trace's prompts, recorded through a running server: the trace the comparison rule judges.

Token ids in, token ids out: the snapshot's prompt ids and path are sent as ids, so the server's tokenizer cannot
silently differ; where the server tokenizes (``/tokenize``), the snapshot's prompt texts are tokenized there too and
a difference is what it is, a tokenizer change (`ServerStale`, naming the first differing token).

Modes (`protocol.MODES`): *teacher forced*, the whole path scored in one request per prompt; each step gets the
server's logprob of the recorded token and its top-k, and a greedy step where the server's top-1 is another token ends
that prompt's path there with the server's token, as its own decoding would. *regenerated*, the server's own greedy
decoding compared as a new trace (for servers that cannot score a given sequence, or on request).

A server reports logprobs, not logits: each step's processed score and log-sum-exp are the reference's, moved by the
logprob's change (so the score is judged as the logprob is), and the environment says so. The served dtype is the
reported one, else the declared one, else the one the logprobs show (`dtype.resolve_dtype`), and the environment
says which: a bfloat16 server is never judged as float32.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from pytest_genguard.core.environments import NORMALIZER_FIELD
from pytest_genguard.core.errors import ServerError, ServerStale
from pytest_genguard.core.jsontext import JSONScalar
from pytest_genguard.core.rule import Rule
from pytest_genguard.core.text import quote
from pytest_genguard.core.tolerances import canonical_dtype
from pytest_genguard.core.trace import CHAT_SETTING, GenerationTrace, PromptTrace, Step
from pytest_genguard.serving.dtype import resolve_dtype
from pytest_genguard.serving.http import Endpoint
from pytest_genguard.serving.protocol import MODES, Generated, Scored, ServerInfo, ServerMapping
from pytest_genguard.serving.servers import Server, connect

__all__ = ["ServerRun", "at_top_k", "check_tokenizer", "record_server", "top_k_of"]

# Settings under which the server's raw top-1 is what greedy generate() picks (no processor reorders the tokens).
_NEUTRAL_GREEDY = frozenset(
    {"max_new_tokens", "do_sample", "num_beams", "use_cache", "top_k", "record_top_k", "mode", "eos_token_id", "seed"}
    | {CHAT_SETTING}  # how the conversations were rendered: their ids are sent, nothing is decoded otherwise
)


@dataclasses.dataclass(frozen=True)
class ServerRun:
    """A server's trace and what genguard learned on the way: the server, the mode, the dtype and its source."""

    trace: GenerationTrace
    info: ServerInfo
    mode: str
    dtype: str
    dtype_source: str


def top_k_of(reference: GenerationTrace) -> int:
    """How many alternatives the reference recorded per step (the logprobs to ask the server for)."""
    return max((len(s.top_ids) for p in reference.prompts for s in p.steps), default=0)


def at_top_k(trace: GenerationTrace, k: int) -> GenerationTrace:
    """`trace` with every step's top-k cut to its best `k`: a server asked for more logprobs than the snapshot
    recorded (to tighten a fidelity bound) is judged by the comparison rule at the snapshot's own top-k."""
    if all(len(s.top_ids) <= k for p in trace.prompts for s in p.steps):
        return trace
    prompts = tuple(
        dataclasses.replace(
            p,
            steps=tuple(
                dataclasses.replace(s, top_ids=s.top_ids[:k], top_logprobs=s.top_logprobs[:k]) for s in p.steps
            ),
        )
        for p in trace.prompts
    )
    return dataclasses.replace(trace, prompts=prompts)


def record_server(
    endpoint: Endpoint,
    reference: GenerationTrace,
    *,
    model: str | None = None,
    dtype: str | None = None,
    mode: str = "teacher forced",
    server: Server | None = None,
    logprobs: int | None = None,
    every_step: bool = False,
) -> ServerRun:
    """The trace the server at `endpoint` gives for `reference`'s prompts, to compare with `reference`.

    `model` names the served model (default: the one the server serves); `dtype` declares the served dtype when the
    server does not report it (default: inferred from the logprobs). `server` is the server as this run probed it
    (`servers.connect`; default: probed here, its API the one it answers to). `logprobs` is
    how many logprobs to ask for per step (default: the snapshot's top-k; more tightens a fidelity bound, and
    `at_top_k` cuts the trace back for the comparison rule). `every_step`: a teacher-forced path is scored at every
    step (a fidelity budget's judgement: a flip counts, it does not end the path), not ended where the server prefers
    another greedy token (the comparison rule's explanation). Raises `ServerError` when the server cannot answer as
    asked and `ServerStale` when its tokenizer differs.
    """
    if mode not in MODES:
        raise ValueError(f"record_server(mode={mode!r}): choose one of {', '.join(MODES)}")
    declared = None if dtype is None else canonical_dtype(dtype)
    if declared not in (None, "float32", "float16", "bfloat16"):
        raise ValueError(f"record_server(dtype={dtype!r}): not a dtype genguard knows (float32, float16, bfloat16)")
    if not reference.prompts or not any(p.steps for p in reference.prompts):
        raise ValueError("record_server(): the reference trace has no generated steps; nothing to judge")
    k = top_k_of(reference)
    if logprobs is not None:
        if isinstance(logprobs, bool) or not isinstance(logprobs, int) or logprobs < k:
            raise ValueError(
                f"record_server(logprobs={logprobs!r}): the snapshot recorded a top-{k}; ask the server for at least "
                f"{k} logprobs (--max-logprobs {k} or more)"
            )
        k = logprobs
    server = server if server is not None else connect(endpoint, model=model)
    mapping, info = server.mapping, server.info
    tokenizer_checked = check_tokenizer(endpoint, info, mapping, reference)
    if mode == "teacher forced" and mapping.score is None:
        mode = "regenerated"  # the server can only continue: its own decoding is what can be judged
    greedy = _plain_greedy(reference)
    if mode == "regenerated" and not greedy:
        raise ValueError(
            "record_server(mode='regenerated'): the server's own decoding is greedy (temperature 0, no processors); "
            "it judges greedy snapshots decoded without processors only: teacher force this one"
        )
    prompts = []
    for i, p in enumerate(reference.prompts):
        if not p.prompt_ids:
            raise ValueError(f"record_server(): prompt {i} {quote(p.prompt, 30)} has no prompt ids to send")
        if mode == "teacher forced":
            assert mapping.score is not None
            path = [s.token_id for s in p.steps]
            scored = mapping.score(endpoint, info, [*p.prompt_ids, *path], len(p.prompt_ids), k) if path else []
            prompts.append(_forced(p, scored, greedy and not every_step, reference))
        else:
            generated = mapping.generate(endpoint, info, p.prompt_ids, max(len(p.steps), 1), k)
            prompts.append(_regenerated(p, generated, reference))
    try:
        evidence = resolve_dtype(
            info.dtype, declared, (tuple(lp for _, lp in _tops(s)) for p in prompts for s in p.steps), where=info.url
        )
    except ValueError as exc:
        raise ServerError(f"{info.url}: {exc}") from None
    environment: dict[str, JSONScalar] = {
        "engine": info.label(mode),
        "server": info.url,
        "served_model": info.model,
        "dtype": evidence.dtype,
        "dtype_source": evidence.describe(),
        "logprobs": "float32",
        "engine_values": (
            f"{mapping.logprobs} logprobs by {info.engine}, {mode}; score and lse are the reference's moved by the "
            "logprob's change (a server reports no logits)"
        ),
        "tokenizer_check": "prompt texts tokenized by the server: same ids"
        if tokenizer_checked
        else "not checked: the server does not tokenize",
    }
    environment.update({f"server_{key}": value for key, value in info.details.items()})
    if info.normalizer_terms is not None:
        environment[NORMALIZER_FIELD] = info.normalizer_terms
    trace = GenerationTrace(
        prompts=tuple(prompts),
        settings=reference.settings,
        model=None,  # a server does not show its weights: the prompts, settings and tokenizer are what is checked
        tokenizer=reference.tokenizer if tokenizer_checked else None,
        environment=environment,
        token_texts=reference.token_texts,
    )
    return ServerRun(trace, info, mode, evidence.dtype, evidence.source)


def check_tokenizer(endpoint: Endpoint, info: ServerInfo, mapping: ServerMapping, reference: GenerationTrace) -> bool:
    """Whether the server's tokenizer gives every prompt text the reference's prompt ids (False: it cannot
    tokenize); `ServerStale` naming the first differing token otherwise. Where the server renders conversations
    (`ServerMapping.render`), each recorded conversation is rendered there first: another chat template is stale,
    named by the first differing character."""
    if not info.tokenize:
        return False
    chat = reference.chat_template_kwargs() or {}
    for i, p in enumerate(reference.prompts):
        if p.messages is not None and mapping.render is not None:
            rendered = mapping.render(endpoint, info, p.messages, chat)
            if rendered != p.prompt:
                at = next((j for j, (a, b) in enumerate(zip(p.prompt, rendered, strict=False)) if a != b), None)
                at = min(len(rendered), len(p.prompt)) if at is None else at
                raise ServerStale(
                    f"{info.url}: the server's chat template ({info.model}) renders conversation {i} otherwise than "
                    f"the snapshot's: from character {at} on, recorded {quote(p.prompt[at:], 40)}, served "
                    f"{quote(rendered[at:], 40)}. The served model carries another chat template: serve the one "
                    "the snapshot was recorded with (llama-server --chat-template-file), or re-record the snapshot"
                )
        # a conversation's text is its rendered template, which wrote its special tokens: none are added
        ids = mapping.tokenize(endpoint, info, p.prompt, p.messages is None)
        if ids == p.prompt_ids:
            continue
        at = next((j for j, (a, b) in enumerate(zip(p.prompt_ids, ids, strict=False)) if a != b), None)
        if at is None:
            at = min(len(ids), len(p.prompt_ids))
        recorded = p.prompt_ids[at] if at < len(p.prompt_ids) else "(end)"
        served = ids[at] if at < len(ids) else "(end)"
        raise ServerStale(
            f"{info.url}: the server's tokenizer ({info.model}) differs from the snapshot's: prompt {i} "
            f"{quote(p.prompt, 40)} tokenizes to other ids from token {at} on: recorded id {recorded}, served id "
            f"{served} ({len(p.prompt_ids)} vs {len(ids)} tokens). The server serves another tokenizer (or model): "
            "point at the model the snapshot was recorded with, or re-record the snapshot"
        )
    return True


def _plain_greedy(reference: GenerationTrace) -> bool:
    """A greedy trace decoded without processors: the server's raw top-1 is then generate()'s choice."""
    settings = reference.settings
    greedy = not settings.get("do_sample") and (settings.get("num_beams") in (None, 1))
    return greedy and all(value is None or key in _NEUTRAL_GREEDY for key, value in settings.items())


def _tops(step: Step) -> Sequence[tuple[int, float]]:
    return tuple(zip(step.top_ids, step.top_logprobs, strict=True))


def _moved(recorded: Step, token_id: int, token: str, logprob: float, top: Sequence[tuple[int, float]]) -> Step:
    """A step with the server's values; score and lse are the recorded ones moved by the logprob's change."""
    shift = logprob - recorded.logprob
    return Step(
        token_id=token_id,
        token=token,
        logprob=logprob,
        score=recorded.score + shift,
        top_ids=tuple(t for t, _ in top),
        top_logprobs=tuple(lp for _, lp in top),
        lse=recorded.lse,
    )


def _forced(p: PromptTrace, scored: list[Scored], greedy: bool, reference: GenerationTrace) -> PromptTrace:
    if len(scored) != len(p.steps):
        raise ServerError(f"the server scored {len(scored)} of the {len(p.steps)} steps of {quote(p.prompt, 30)}")
    steps: list[Step] = []
    finish = p.finish_reason
    for recorded, got in zip(p.steps, scored, strict=True):
        best_id, best_lp = got.top[0]
        if greedy and best_id != recorded.token_id and best_lp > got.logprob and _holds(reference, recorded, got):
            # The server prefers another token: its own decoding would leave the path here; nothing after counts.
            # (Unless the recorded token's own logprob moved beyond the allowance: that is the finding, kept.)
            text = reference.token_text(best_id) or f"<id {best_id}>"
            steps.append(_moved(recorded, best_id, text, best_lp, got.top))
            finish = "stop"
            break
        steps.append(_moved(recorded, recorded.token_id, recorded.token, got.logprob, got.top))
    return dataclasses.replace(p, steps=tuple(steps), finish_reason=finish)


def _holds(reference: GenerationTrace, recorded: Step, got: Scored) -> bool:
    """Whether the server's logprob of the recorded token is within the reference dtype's allowance of the recorded
    one (a split at a near tie is then the question; otherwise the moved logprob is)."""
    return Rule.against(reference).holds(recorded.logprob, got.logprob, lse=recorded.lse)


def _regenerated(p: PromptTrace, generated: Generated, reference: GenerationTrace) -> PromptTrace:
    steps = []
    for t, got in enumerate(generated.steps):
        text = reference.token_text(got.token_id) or got.token_text or f"<id {got.token_id}>"
        # past the recorded path (or on another token) the recorded score stands in: only the logprobs are compared
        recorded = p.steps[min(t, len(p.steps) - 1)] if p.steps else Step(got.token_id, text, got.logprob, 0.0, (), ())
        steps.append(_moved(recorded, got.token_id, text, got.logprob, got.top))
    return dataclasses.replace(p, steps=tuple(steps), finish_reason=generated.finish_reason)
