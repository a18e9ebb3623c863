"""The server under load: does a path or a value move with batching or the prefix cache?

A server batches concurrent requests and reuses cached prefixes; both change which kernels see which rows, and on some
servers the numbers. `batch_variance` records the snapshot's prompts teacher forced alone (the baseline), then again
from `clients` concurrent clients mixed with unrelated traffic, over `rounds` passes (the first pass after the baseline
finds the prefixes cached: *warm*; unrelated prompts of other lengths keep the batches mixed). Every step that differs
from the baseline, bitwise, is reported with its size: that is the server's batch variance, which a user can then hold
against the allowance.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from pytest_genguard.core.trace import GenerationTrace
from pytest_genguard.serving.http import Endpoint
from pytest_genguard.serving.record import ServerRun, record_server
from pytest_genguard.serving.servers import Server, connect

__all__ = ["Moved", "VarianceReport", "batch_variance", "moved_steps"]


@dataclass(frozen=True)
class Moved:
    """One step whose values under load differ from the server's own values alone."""

    run: str  # "client 2, round 1"
    prompt: int
    step: int
    what: str  # "logprob", "top-k", "token"
    delta: float  # |difference| of the logprob (inf when the token moved)


@dataclass(frozen=True)
class VarianceReport:
    """What moved under load, over how many runs and steps."""

    runs: int
    steps: int
    moved: tuple[Moved, ...]
    cache: str = "warm"  # which prefix-cache states the rounds covered: "warm", or "cold and warm"

    @property
    def worst(self) -> float:
        return max((m.delta for m in self.moved), default=0.0)

    def summary(self) -> str:
        if not self.moved:
            return (
                f"no batch variance: {self.runs} runs under load (prefix cache {self.cache}), {self.steps} steps each, "
                "bitwise as alone"
            )
        tokens = sum(1 for m in self.moved if m.what == "token")
        lines = [
            f"batch variance: {len(self.moved)} of {self.runs * self.steps} steps moved under load (prefix cache "
            f"{self.cache}) "
            f"({tokens} chose another token), worst |Δlogprob| {self.worst:.3g}"
        ]
        lines += [f"  {m.run}: prompt {m.prompt} step {m.step} {m.what} |Δ| {m.delta:.3g}" for m in self.moved[:20]]
        return "\n".join(lines)


def moved_steps(alone: GenerationTrace, loaded: GenerationTrace, run: str) -> list[Moved]:
    """The steps of `loaded` whose token, logprob or top-k differ from `alone`'s, bitwise."""
    out = []
    for i, (a, b) in enumerate(zip(alone.prompts, loaded.prompts, strict=True)):
        for s, (x, y) in enumerate(zip(a.steps, b.steps, strict=False)):
            if x.token_id != y.token_id:
                out.append(Moved(run, i, s, "token", math.inf))
                break
            if x.logprob != y.logprob:
                out.append(Moved(run, i, s, "logprob", abs(x.logprob - y.logprob)))
            elif x.top_ids != y.top_ids or x.top_logprobs != y.top_logprobs:
                deltas = [abs(p - q) for p, q in zip(x.top_logprobs, y.top_logprobs, strict=False)]
                out.append(Moved(run, i, s, "top-k", max(deltas, default=0.0)))
        if len(a.steps) != len(b.steps):
            out.append(Moved(run, i, min(len(a.steps), len(b.steps)), "token", math.inf))
    return out


def batch_variance(
    endpoint: Endpoint,
    reference: GenerationTrace,
    *,
    clients: int = 4,
    rounds: int = 2,
    background: Sequence[Sequence[int]] = (),
    model: str | None = None,
    server: Server | None = None,
) -> tuple[ServerRun, VarianceReport]:
    """The server's trace alone, and what moves when `clients` replay the prompts at once beside `background`
    generation requests (token id prompts of unrelated traffic), `rounds` times. `server`: the server as this run
    probed it (default: probed here)."""
    server = server if server is not None else connect(endpoint, model=model)
    mapping = server.mapping
    alone = record_server(endpoint, reference, server=server)
    steps = sum(len(p.steps) for p in alone.trace.prompts)

    def client(_: int) -> GenerationTrace:
        return record_server(endpoint, reference, server=server).trace

    def noise(ids: Sequence[int]) -> None:
        mapping.generate(endpoint, server.info, ids, 16, 1)

    moved: list[Moved] = []
    states = set()
    with ThreadPoolExecutor(max_workers=clients + max(len(background), 1)) as pool:
        for r in range(rounds):
            cold = r % 2 == 0 and mapping.reset_cache is not None and mapping.reset_cache(endpoint)
            states.add("cold" if cold else "warm")
            traffic = [pool.submit(noise, ids) for ids in background]
            traces = list(pool.map(client, range(clients)))
            for future in traffic:
                future.result()
            for c, trace in enumerate(traces):
                moved += moved_steps(alone.trace, trace, f"client {c}, round {r} ({'cold' if cold else 'warm'})")
    cache = " and ".join(sorted(states))
    return alone, VarianceReport(clients * rounds, steps, tuple(moved), cache)
