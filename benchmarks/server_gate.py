"""The deploy gate's throughput: snapshots judged per second by `genguard check-server` at 1, 4 and 16 requests in
flight (the ratio to one), and what judging by a fidelity budget costs against the float rule.

Server: by default the recorded real vLLM responses (fixtures/vllm_responses, the served tiny llama's first prompt,
12 steps, top-5) replayed by tests/support/replay_server.py in a subprocess of its own, so the client's threads do
not share a GIL with the server. Two latencies: 0 ms (what genguard and the loopback cost: the client's ceiling) and a
fixed 25 ms per scoring request (a server whose requests overlap perfectly: the most concurrency can hide). Neither is
a real server's batching; `python -m benchmarks.server_gate URL SNAPSHOT...` measures one (e.g. the vLLM CPU server).

Each figure times its two sides in alternation (`harness.alternate`) and reports the per-pair ratio.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable from the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import Result, alternate, child_env, ms
from pytest_genguard.core.budget import parse_budget
from pytest_genguard.core.trace import GenerationTrace
from pytest_genguard.serving.check import CheckOptions, check_traces
from pytest_genguard.serving.http import Endpoint

ROOT = Path(__file__).resolve().parents[1]
RESPONSES = ROOT / "fixtures" / "vllm_responses"
LEVELS = (4, 16)
BUDGET = "kld_mean=1e-3,kld_p99=3e-3,kld_max=4e-3"  # the served tiny model's bf16 scale (docs/servers.md)

_SERVER = """
import sys, time
sys.path.insert(0, {support!r})
from replay_server import Replay, Reply, recorded, serving
r = Replay()
for name in ("version", "models", "tokenize"):
    r.add(name)
score = recorded("score")["body"]
refusal = recorded("logprobs_cap")["body"]["error"]
def complete(body):
    if body["prompt_logprobs"] > 5:  # the recorded responses hold a top-5: the replayed server's cap
        message = f"Requested prompt logprobs of {{body['prompt_logprobs']}}, which is greater than max allowed: 5"
        return Reply(400, {{"error": {{**refusal, "message": message}}}})
    return Reply(200, score, delay={latency!r})
r.routes[("POST", "/v1/completions")] = complete
with serving(r):
    print(r.url, flush=True)
    sys.stdin.read()
"""


@contextmanager
def replay_server(latency: float) -> Iterator[str]:
    """The replayed vLLM server in a subprocess, each scoring request answered after `latency` seconds."""
    code = _SERVER.format(support=str(ROOT / "tests" / "support"), latency=latency)
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=child_env()
    )
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().strip()
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=30)


def snapshots(count: int) -> list[tuple[str, GenerationTrace]]:
    """`count` copies of the recorded snapshot's first prompt (the one the responses answer)."""
    trace = GenerationTrace.from_json((RESPONSES / "snapshot.genguard").read_text(encoding="utf-8"))
    first = dataclasses.replace(trace, prompts=trace.prompts[:1])
    return [(f"snapshot {i}", first) for i in range(count)]


def _judge(url: str, traces: Sequence[tuple[str, GenerationTrace]], **options: object) -> int:
    return check_traces(Endpoint(url), traces, out=io.StringIO(), options=CheckOptions(**options))  # type: ignore[arg-type]


def _steps(traces: Sequence[tuple[str, GenerationTrace]]) -> str:
    prompts = {len(t.prompts) for _, t in traces}
    steps = {sum(len(p.steps) for p in t.prompts) for _, t in traces}
    return f"{'/'.join(map(str, sorted(prompts)))} prompts, {'/'.join(map(str, sorted(steps)))} steps"


def throughput(url: str, traces: Sequence[tuple[str, GenerationTrace]], pairs: int, where: str) -> list[Result]:
    """Rows: snapshots per second at each level of concurrency against one at a time (the ratio t(1) / t(N))."""
    rows = []
    for level in LEVELS:
        paired = alternate(
            lambda: _judge(url, traces, concurrency=1), lambda n=level: _judge(url, traces, concurrency=n), pairs
        )
        speedup = paired.ratios
        one, many = len(traces) / paired.a.median, len(traces) / paired.b.median
        rows.append(
            Result(
                key="server_gate",
                figure=f"check-server snapshots per second, {level} in flight vs 1, {where}",
                target="report",
                spread=speedup,
                unit="×",
                headline=f"{speedup.median:.2f}× ({many:.0f}/s vs {one:.0f}/s)",
                met=None,
                notes=[
                    f"{len(traces)} snapshots of {_steps(traces)} per run; {ms(paired.a.median)} at 1 vs "
                    f"{ms(paired.b.median)} at {level} (medians of {pairs} alternating pairs)"
                ],
            )
        )
    return rows


def budget_cost(url: str, traces: Sequence[tuple[str, GenerationTrace]], pairs: int, where: str) -> Result:
    """The budget's judgement (the cap probe, `traces_report`) against the float rule's, the same snapshots."""
    budget = parse_budget(BUDGET)
    paired = alternate(
        lambda: _judge(url, traces, concurrency=1, budget=budget), lambda: _judge(url, traces, concurrency=1), pairs
    )
    per = len(traces)
    return Result(
        key="server_gate",
        figure=f"check-server --budget vs the float rule, {where}",
        target="report",
        spread=paired.ratios,
        unit="×",
        headline=f"{paired.ratios.median:.2f}×",
        met=None,
        notes=[
            f"{ms(paired.a.median / per)} vs {ms(paired.b.median / per)} per snapshot ({per} snapshots of "
            f"{_steps(traces)}, one in flight; medians of {pairs} alternating pairs; the budget run probes the "
            "server's logprobs cap once and asks for that many logprobs per step, the rule for the snapshot's top-k)"
        ],
    )


def run(smoke: bool) -> list[Result]:
    count, pairs = (4, 1) if smoke else (32, 7)
    traces = snapshots(count)
    rows: list[Result] = []
    with replay_server(0.0) as url:
        rows += throughput(url, traces, pairs, "replayed vLLM responses, 0 ms latency")
        rows.append(budget_cost(url, traces, pairs, "replayed vLLM responses, 0 ms latency"))
    with replay_server(0.025) as url:
        rows += throughput(url, traces, pairs, "replayed vLLM responses, 25 ms per request")
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.server_gate", description=__doc__)
    parser.add_argument("url", help="a running server serving the snapshots' model")
    parser.add_argument("snapshots", type=Path, nargs="+")
    parser.add_argument("--pairs", type=int, default=5)
    args = parser.parse_args(argv)
    traces = [(str(p), GenerationTrace.from_json(p.read_text(encoding="utf-8"), source=str(p))) for p in args.snapshots]
    where = f"server at {args.url}"
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"started {started}, load {os.getloadavg()}")
    for row in [*throughput(args.url, traces, args.pairs, where), budget_cost(args.url, traces, args.pairs, where)]:
        print(f"- {row.figure}: {row.headline}; {'; '.join(row.notes)}")
    return 0


if __name__ == "__main__":
    with tempfile.TemporaryDirectory():
        sys.exit(main())
