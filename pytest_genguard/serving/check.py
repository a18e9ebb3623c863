"""`genguard check-server`: judge a running server against snapshots, one verdict per snapshot and one exit code.

Exit codes: 0 every snapshot holds, 1 a regression, 2 bad input (unreachable server, model not served, a logprobs cap
below the snapshot's top-k, an unreadable snapshot), 3 stale (the server's tokenizer or the snapshot's settings
differ: re-record, or point at the right model). The server is probed once for all snapshots.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO

from pytest_genguard.core.compare import compare, step_scale
from pytest_genguard.core.comparison import Comparison
from pytest_genguard.core.environments import logprobs_epsilon
from pytest_genguard.core.errors import ServerStale
from pytest_genguard.core.trace import GenerationTrace
from pytest_genguard.core.verdict import Verdict
from pytest_genguard.serving.http import Endpoint
from pytest_genguard.serving.protocol import ServerInfo
from pytest_genguard.serving.record import ServerRun, record_server
from pytest_genguard.serving.vllm import VLLM

__all__ = ["EXIT_REGRESSION", "EXIT_STALE", "Judged", "check_traces", "exit_code", "judge", "worst_share"]

EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_USAGE = 2
EXIT_STALE = 3


@dataclass(frozen=True)
class Judged:
    """One snapshot judged against the server: the comparison, or why it is stale before any value was compared."""

    label: str
    run: ServerRun | None
    comparison: Comparison | None
    stale: str | None = None

    @property
    def verdict(self) -> Verdict:
        return Verdict.STALE if self.comparison is None else self.comparison.verdict


def judge(
    endpoint: Endpoint,
    reference: GenerationTrace,
    *,
    label: str = "snapshot",
    model: str | None = None,
    dtype: str | None = None,
    mode: str = "teacher forced",
    info: ServerInfo | None = None,
) -> Judged:
    """`reference` against the server, by the comparison rule (`ServerError` for a server that cannot answer)."""
    try:
        run = record_server(endpoint, reference, model=model, dtype=dtype, mode=mode, mapping=VLLM, info=info)
    except ServerStale as exc:
        return Judged(label, None, None, stale=str(exc))
    return Judged(label, run, compare(reference, run.trace))


def worst_share(cmp: Comparison) -> tuple[float, str]:
    """The largest |difference| / allowance over the values both traces hold on their common path (1.0 is the
    edge of the tolerance), and where: how close a passing server came to failing."""
    tol = cmp.tolerances
    epsilon = max(logprobs_epsilon(cmp.expected.environment), logprobs_epsilon(cmp.actual.environment))
    worst, where = 0.0, "no value compared"
    for i, (e, a) in enumerate(zip(cmp.expected.prompts, cmp.actual.prompts, strict=False)):
        for s, (es, as_) in enumerate(zip(e.steps, a.steps, strict=False)):
            if es.token_id != as_.token_id:
                break
            rounding = epsilon * step_scale(es, as_)
            a_top = dict(zip(as_.top_ids, as_.top_logprobs, strict=True))
            pairs = [("logprob", es.logprob, as_.logprob)] + [
                (f"top id {tid}", lp, a_top[tid])
                for tid, lp in zip(es.top_ids, es.top_logprobs, strict=True)
                if tid in a_top
            ]
            for name, x, y in pairs:
                if not (math.isfinite(x) and math.isfinite(y)):
                    continue
                allowed = tol.allowed(x, y, rounding)
                share = abs(x - y) / allowed if allowed > 0 else (math.inf if x != y else 0.0)
                if share > worst:
                    worst, where = share, f"prompt {i} step {s} {name}"
    return worst, where


def exit_code(judged: Sequence[Judged]) -> int:
    """1 when a snapshot regressed, else 3 when one is stale, else 0."""
    verdicts = [j.verdict for j in judged]
    if any(not v.ok and v is not Verdict.STALE for v in verdicts):
        return EXIT_REGRESSION
    if Verdict.STALE in verdicts:
        return EXIT_STALE
    return EXIT_OK


def check_traces(
    endpoint: Endpoint,
    traces: Sequence[tuple[str, GenerationTrace]],
    *,
    model: str | None,
    dtype: str | None,
    out: IO[str],
) -> int:
    """Judge each labelled trace against the server (probed once); print one line per snapshot and each failure's
    explanation; return the exit code. `ServerError` propagates (bad input: exit 2)."""
    info = VLLM.probe(endpoint, model)
    out.write(f"genguard check-server: {info.label('teacher forced')}, model {info.model}\n")
    judged = []
    for label, trace in traces:
        result = judge(endpoint, trace, label=label, model=model, dtype=dtype, info=info)
        judged.append(result)
        if result.comparison is None:
            out.write(f"STALE {label}\n  {result.stale}\n")
            continue
        cmp = result.comparison
        share, where = worst_share(cmp)
        assert result.run is not None
        dtype_note = f"dtype {result.run.dtype} ({result.run.dtype_source})"
        out.write(f"{cmp.verdict.name} {label}: worst drift {share:.2%} of the allowance ({where}); {dtype_note}\n")
        if not cmp.ok:
            out.write("  " + str(cmp).replace("\n", "\n  ") + "\n")
    code = exit_code(judged)
    out.write(f"{len(judged)} snapshots: exit {code}\n")
    return code
