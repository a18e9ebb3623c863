"""A sampled snapshot's sampler judged on a server, along the snapshot's own path.

A seeded sampled path cannot be replayed on a server (its RNG is another), but each step's distribution can be asked
for: one request per step, the prompt being the snapshot's prompt ids and path so far, one token to generate, the
snapshot's settings mapped onto the server's fields (`protocol.SamplerApi.fields`), and the server's probabilities
after its sampler in the answer (llama-server's ``post_sampling_probs``, vLLM's processed logprobs mode). Each step is
judged by `core.sampling.judge_step` against what `record()` kept.

Where a step differs and the request was not aligned, the alignments the mapping knows (a sampler order, a penalty
window) are tried one at a time at that step: one that makes it within is the cause, shown; its fields are the fix
(``--align-sampler`` sends them). Differences no request changes are named from the settings (`SamplerApi.known`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_genguard.core.errors import ServerError
from pytest_genguard.core.jsontext import JSONScalar
from pytest_genguard.core.sampling import (
    Cause,
    SamplerReport,
    SamplerSettings,
    StepJudgement,
    judge_step,
    judgeable,
    step_sequence,
)
from pytest_genguard.core.tolerances import Tolerances, dtype_default
from pytest_genguard.core.trace import GenerationTrace, Step
from pytest_genguard.serving.protocol import SamplerApi
from pytest_genguard.serving.servers import Server

__all__ = ["judge_sampler", "sampler_api"]


def sampler_api(server: Server) -> SamplerApi:
    """The server's sampler API, checked once per run (`SamplerApi.check`: vLLM's logprobs mode); `ServerError`
    where the server cannot show its sampler."""
    api = server.mapping.sampler
    if api is None:
        raise ServerError(f"{server.info.url}: {server.info.engine} shows no distribution after its sampler")
    if api.check is not None:
        check = api.check
        server.learned("sampler checked", lambda: check(server.endpoint, server.info))
    return api


def judge_sampler(
    server: Server, reference: GenerationTrace, *, align: bool = False, tolerances: Tolerances | None = None
) -> SamplerReport | None:
    """`reference`'s sampled steps against the server's sampler (None: the snapshot does not sample), under
    `tolerances` (default: the snapshot dtype's); `align` sends the mapping's alignments with every step."""
    sampler, why_not = judgeable(reference)
    if sampler is None:
        return None
    if why_not is not None:
        return SamplerReport(not_judged=why_not)
    api = sampler_api(server)
    try:
        api.fields(sampler, 1)
    except ValueError as exc:
        return SamplerReport(not_judged=str(exc))
    tol = tolerances if tolerances is not None else dtype_default(reference.dtype)
    applicable = tuple(a for a in api.alignments if a.applies(sampler))
    aligned = applicable if align else ()
    cap = server.learned("distribution cap", lambda: api.cap(server.endpoint, server.info))
    judged: list[StepJudgement] = []
    sent: dict[str, JSONScalar] = {}
    first_outside: tuple[int, int, Step, dict[str, Any], int] | None = None
    for i, t, step in step_sequence(reference):
        prefix = [*reference.prompts[i].prompt_ids, *(s.token_id for s in reference.prompts[i].steps[:t])]
        fields = _fields(api, sampler, len(prefix), aligned)
        asked = _asked(step, cap)
        served = api.distribution(server.endpoint, server.info, prefix, fields, asked)
        result = judge_step(step, served, sampler, tol, prompt=i, index=t, asked=asked)
        judged.append(result)
        sent = sent or {k: _scalar(v) for k, v in fields.items()}
        if result.status == "outside" and first_outside is None:
            first_outside = (i, t, step, fields, asked)
    causes: tuple[Cause, ...] = ()
    if first_outside is not None:
        causes = _diagnose(server, api, sampler, tol, reference, first_outside, aligned, applicable)
    names = tuple(a.name for a in aligned)
    return SamplerReport(steps=tuple(judged), sent=sent, aligned=names, causes=causes)


def _fields(api: SamplerApi, sampler: SamplerSettings, length: int, aligned: tuple[Any, ...]) -> dict[str, Any]:
    fields = api.fields(sampler, length)
    for alignment in aligned:
        fields.update(alignment.fields(sampler, length))
    return fields


def _asked(step: Step, cap: int | None) -> int:
    """How many tokens to ask for: one more than the snapshot's largest near-threshold support (so a longer one is
    seen as longer), at most the server's cap."""
    assert step.support is not None
    wanted = max(step.support.high + 1, len(step.top_ids))
    return wanted if cap is None else min(wanted, cap)


def _scalar(value: Any) -> JSONScalar:
    return value if isinstance(value, (str, int, float, bool)) or value is None else str(value).replace("'", '"')


def _diagnose(
    server: Server,
    api: SamplerApi,
    sampler: SamplerSettings,
    tol: Tolerances,
    reference: GenerationTrace,
    first: tuple[int, int, Step, dict[str, Any], int],
    aligned: tuple[Any, ...],
    applicable: tuple[Any, ...],
) -> tuple[Cause, ...]:
    """Why the first differing step differs: each alignment not sent, tried alone at that step (a cause is shown
    when its fields make the step within), then all of them together; else the differences known from the
    settings."""
    i, t, step, fields, asked = first
    prefix = [*reference.prompts[i].prompt_ids, *(s.token_id for s in reference.prompts[i].steps[:t])]

    def within(extra: Mapping[str, Any]) -> bool:
        served = api.distribution(server.endpoint, server.info, prefix, {**fields, **extra}, asked)
        return judge_step(step, served, sampler, tol, prompt=i, index=t, asked=asked).status != "outside"

    untried = [a for a in applicable if a not in aligned]
    shown = [a for a in untried if within(a.fields(sampler, len(prefix)))]
    if not shown and len(untried) > 1:
        together: dict[str, Any] = {}
        for a in untried:
            together.update(a.fields(sampler, len(prefix)))
        if within(together):
            shown = untried
    causes = [_proven(a.cause) for a in shown]
    return (*causes, *(c for c in api.known(sampler) if c.name not in {k.name for k in causes}))


def _proven(cause: Cause) -> Cause:
    return Cause(cause.name, cause.explanation, cause.fix, proven=True)
