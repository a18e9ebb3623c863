"""`genguard check-server`: judge a running server against snapshots, one verdict per snapshot and one exit code.

Two judges. The comparison rule (default): the server's values against the snapshot's, within the allowance of the
dtype; a server in another dtype fails it, and the message names ``--budget``. A fidelity budget (``--budget``): the
server's distribution against the snapshot's by the metrics of `core.budget` (`traces_report`: the KLD is a lower
bound from the two top-k), the same presets and semantics as in process; changed prompts, settings or tokenizer are
still stale.

Exit codes (`core.gate`): 0 every snapshot holds (with a budget: within, proven), 1 a regression or a budget broken
(proven), 2 bad input (unreachable server, model not served, a logprobs cap below the snapshot's top-k, an unreadable
snapshot), 3 stale (the server's tokenizer or the snapshot's settings differ: re-record, or point at the right model),
4 within the budget on lower bounds only (unproven). The worst wins in that order: 1, then 3, then 4. The server is
probed once for all snapshots (`servers.connect`); `concurrency` snapshots are judged at once (a thread per request in
flight).

A sampled snapshot's sampler is judged too (`sampler.judge_sampler`): its distribution after truncation at every step
of the snapshot's path; outside is a regression (exit 1), a support the server does not show is unproven (exit 4).
llama-server cannot teacher force, so a sampled snapshot is judged there by its sampler alone.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from pytest_genguard.core.budget import Budget, FidelityReport, traces_report
from pytest_genguard.core.compare import Fingerprints, compare
from pytest_genguard.core.comparison import Comparison
from pytest_genguard.core.errors import ServerStale
from pytest_genguard.core.gate import (
    EXIT_OUTSIDE,
    EXIT_STALE,
    EXIT_UNPROVEN,
    EXIT_USAGE,
    EXIT_WITHIN,
    exit_for,
    gate_line,
)
from pytest_genguard.core.sampling import SamplerReport, SamplerSettings
from pytest_genguard.core.tolerances import Overrides, Tolerances, dtype_default
from pytest_genguard.core.trace import GenerationTrace
from pytest_genguard.core.verdict import Verdict
from pytest_genguard.serving.http import Endpoint
from pytest_genguard.serving.load import batch_variance
from pytest_genguard.serving.protocol import ServerMapping
from pytest_genguard.serving.record import ServerRun, at_top_k, check_tokenizer, record_server, top_k_of
from pytest_genguard.serving.sampler import judge_sampler
from pytest_genguard.serving.servers import Server, connect
from pytest_genguard.serving.written import trace_paths, write_trace

__all__ = [
    "EXIT_REGRESSION",
    "EXIT_STALE",
    "EXIT_UNPROVEN",
    "EXIT_USAGE",
    "ON_A_SERVER",
    "UNCAPPED_LOGPROBS",
    "CheckOptions",
    "Judged",
    "LogprobCap",
    "background_traffic",
    "budget_logprobs",
    "check_traces",
    "exit_code",
    "judge",
    "logprob_cap",
    "worst_share",
]

EXIT_OK = EXIT_WITHIN
EXIT_REGRESSION = EXIT_OUTSIDE
UNCAPPED_LOGPROBS = 20
"""Logprobs asked of a server that sets no cap (vLLM's own default cap)."""
ON_A_SERVER = "ask the server for at least the snapshot's top-k logprobs at every step (--max-logprobs)"
"""How a server's bound is proven, besides a calibrated snapshot (`core.gate.unproven_hint`)."""


@dataclass(frozen=True)
class Judged:
    """One snapshot judged against the server: the comparison (the rule's, or the staleness check's under a budget),
    the budget's report, the sampler's report (a sampled snapshot), or why it is stale before any value was compared.
    A sampled snapshot on a server that cannot teacher force has a sampler report and no comparison."""

    label: str
    run: ServerRun | None
    comparison: Comparison | None
    stale: str | None = None
    report: FidelityReport | None = None
    sampler: SamplerReport | None = None

    @property
    def verdict(self) -> Verdict:
        if self.stale is not None or (self.comparison is not None and self.comparison.verdict is Verdict.STALE):
            return Verdict.STALE
        if self.sampler is not None and self.sampler.status == "outside":
            return Verdict.REGRESSION
        if self.comparison is None:
            return Verdict.STALE if self.sampler is None else Verdict.WITHIN_TOLERANCE
        if self.report is not None:
            return Verdict.WITHIN_TOLERANCE if self.report.holds else Verdict.REGRESSION
        return self.comparison.verdict

    @property
    def status(self) -> str:
        """The budget's status (within, outside, unproven), "stale", or the rule's "holds"/"regression"; a sampler
        outside is a "regression", one unproven makes a holding snapshot "unproven"."""
        if self.verdict is Verdict.STALE:
            return "stale"
        if self.sampler is not None and self.sampler.status == "outside":
            return "regression"
        rule = "holds" if self.verdict.ok else "regression"
        status = self.report.status if self.report is not None else rule
        if self.sampler is not None and self.sampler.status == "unproven" and status in ("holds", "within"):
            return "unproven"
        return status


def judge(
    endpoint: Endpoint,
    reference: GenerationTrace,
    *,
    label: str = "snapshot",
    model: str | None = None,
    dtype: str | None = None,
    mode: str = "teacher forced",
    server: Server | None = None,
    budget: Budget | None = None,
    logprobs: int | None = None,
    overrides: Overrides | None = None,
    align_sampler: bool = False,
) -> Judged:
    """`reference` against the server: by the comparison rule (with `overrides`: a test's ini and marker
    tolerances), or by `budget` (`ServerError` for a server that cannot answer); a sampled snapshot's sampler too
    (`align_sampler`: with the requests that align the server's sampler semantics). `logprobs` asks for more than
    the snapshot's top-k (a tighter bound); the rule judges the snapshot's top-k. `server`: the server as this run
    probed it (default: probed here)."""
    server = server if server is not None else connect(endpoint, model=model)
    overrides = overrides or Overrides()
    sampled = SamplerSettings.of(reference.settings) is not None
    if sampled and server.mapping.score is None:  # llama-server: no teacher forcing; its sampler is what it shows
        try:
            check_tokenizer(endpoint, server.info, server.mapping, reference)
        except ServerStale as exc:
            return Judged(label, None, None, stale=str(exc))
        tol = _sampler_tolerances(reference, server.info.dtype, overrides, budget)
        return Judged(label, None, None, sampler=judge_sampler(server, reference, align=align_sampler, tolerances=tol))
    try:
        run = record_server(
            endpoint,
            reference,
            model=model,
            dtype=dtype,
            mode=mode,
            server=server,
            logprobs=logprobs,
            every_step=budget is not None,  # a budget counts a flip and goes on; the rule explains the first one
        )
    except ServerStale as exc:
        return Judged(label, None, None, stale=str(exc))
    judged = at_top_k(run.trace, top_k_of(reference))
    if budget is None:
        cmp = compare(reference, judged, **overrides.args())
        report = None
    else:
        # a budget compares distributions over the same tokens: another tokenizer, settings or prompts are still
        # stale; the dtype switch is the point
        cmp = compare(reference, judged, check_fingerprints=Fingerprints.TOKENIZER, allow_dtype_change=True)
        if cmp.verdict is Verdict.STALE:
            return Judged(label, run, cmp, stale=str(cmp))
        report = traces_report(reference, run.trace, budget)
    sampler = None
    if sampled and cmp.verdict is not Verdict.STALE:
        tol = _sampler_tolerances(reference, run.dtype, overrides, budget)
        sampler = judge_sampler(server, reference, align=align_sampler, tolerances=tol)
    return Judged(label, run, cmp, report=report, sampler=sampler)


_BUDGET_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}
"""A cast's budget judges the sampler by that dtype's float rule (a server whose logits are rounded so: llama-server's
f16 KV cache); other budgets leave it at the snapshot's (or the served) dtype."""


def _sampler_tolerances(
    reference: GenerationTrace, served: str | None, overrides: Overrides, budget: Budget | None = None
) -> Tolerances:
    """The sampler rule's allowance: the snapshot's dtype default, the served dtype's or a cast budget's where looser,
    with the test's overrides."""
    tol = dtype_default(reference.dtype).loosest(dtype_default(served or reference.dtype))
    cast = _BUDGET_DTYPES.get(budget.precision or "") if budget is not None else None
    return overrides.on(tol.loosest(dtype_default(cast)) if cast else tol)


def worst_share(cmp: Comparison) -> tuple[float, str]:
    """The largest |difference| / allowance over the values the comparison judged (1.0 is the edge of the
    tolerance), and where: how close a passing server came to failing (the rule's own figure, `ErrorStats`)."""
    st = cmp.stats
    return st.max_share, st.max_share_at or "no value compared"


def exit_code(judged: Sequence[Judged]) -> int:
    """1 when a snapshot regressed or broke its budget, else 3 when one is stale, else 4 when one holds its budget
    on lower bounds only, else 0 (`core.gate.exit_for`: the one gate)."""
    return exit_for(j.status for j in judged)


@dataclass(frozen=True)
class CheckOptions:
    """How `check_traces` asks and judges (the command line's options)."""

    model: str | None = None
    dtype: str | None = None
    budget: Budget | None = None
    max_logprobs: int | None = None
    """Logprobs per step to ask for; None: the server's cap under a budget (a tighter bound), else the top-k."""
    concurrency: int = 4
    write_trace: Path | None = None
    load: bool = False
    server: str = "auto"
    """The server's API (`servers.SERVER_KINDS`): auto asks the server."""
    align_sampler: bool = False
    """Send the requests that align the server's sampler semantics with transformers' (`protocol.Alignment`)."""

    def __post_init__(self) -> None:
        if isinstance(self.concurrency, bool) or not isinstance(self.concurrency, int) or self.concurrency < 1:
            raise ValueError(f"--concurrency {self.concurrency!r}: requests in flight at once, at least 1 (e.g. 4)")
        if self.max_logprobs is not None and (isinstance(self.max_logprobs, bool) or self.max_logprobs < 1):
            raise ValueError(f"--max-logprobs {self.max_logprobs!r}: logprobs per step, at least 1 (e.g. 20)")


def _logprobs(
    server: Server, traces: Sequence[tuple[str, GenerationTrace]], opts: CheckOptions, out: IO[str]
) -> int | None:
    """How many logprobs to ask for, said on one line; None: each snapshot's own top-k."""
    k = max((top_k_of(t) for _, t in traces), default=0)
    if opts.max_logprobs is not None:
        if opts.max_logprobs < k:
            raise ValueError(f"--max-logprobs {opts.max_logprobs}: below the snapshots' top-{k}; ask for at least {k}")
        out.write(f"logprobs per step: {opts.max_logprobs} (--max-logprobs)\n")
        return opts.max_logprobs
    if opts.budget is None:
        return None
    asked, said = budget_logprobs(server, [t for _, t in traces])
    if said:
        out.write(f"logprobs per step: {asked} ({said})\n")
    return asked


@dataclass(frozen=True)
class LogprobCap:
    """The server's cap of logprobs per step, probed once (`logprob_cap`): `known` False when its mapping cannot ask,
    `cap` None when it sets none."""

    known: bool
    cap: int | None

    def asked(self, k: int) -> tuple[int | None, str]:
        """How many logprobs a budget's judgement of snapshots with a top-`k` asks for (None: their own top-k), and
        why: the cap (at least `k`), so that the candidate's probability of every token the reference recorded is
        known and the bound proves something (`StepFidelity.complete`)."""
        if not self.known:
            return None, ""
        asked = max(k, UNCAPPED_LOGPROBS if self.cap is None else self.cap)
        said = "the server sets no cap" if self.cap is None else "the server's cap"
        return asked, f"{said}; the snapshots recorded a top-{k}"


def logprob_cap(server: Server, traces: Sequence[GenerationTrace]) -> LogprobCap:
    """The server's cap of logprobs, asked once with the first prompt token of `traces` (one request)."""
    probe = server.mapping.max_logprobs
    if probe is None:
        return LogprobCap(False, None)
    first = next((p.prompt_ids[0] for t in traces for p in t.prompts if p.prompt_ids), None)
    return LogprobCap(True, probe(server.endpoint, server.info, 0 if first is None else first))


def budget_logprobs(server: Server, traces: Sequence[GenerationTrace]) -> tuple[int | None, str]:
    """`logprob_cap(server, traces).asked(k)` for the snapshots' largest top-k: one decision for check-server and
    ``--genguard-server`` (which probes the cap once per run and asks it per snapshot)."""
    return logprob_cap(server, traces).asked(max((top_k_of(t) for t in traces), default=0))


def _lines(result: Judged) -> Iterator[str]:
    """What the command prints for one judged snapshot."""
    label = result.label
    if result.stale is None and result.run is None and result.sampler is not None:
        lines = result.sampler.lines()
        yield f"{result.status.upper()} {label}: {lines[0]}"
        yield from lines[1:]
        return
    if result.stale is not None or result.comparison is None or result.run is None:
        yield f"STALE {label}"
        yield "  " + str(result.stale).replace("\n", "\n  ")
        return
    yield from _raw_lines(result, label, result.comparison, result.run)
    if result.sampler is not None:
        yield from ("  " + line if n == 0 else line for n, line in enumerate(result.sampler.lines()))


def _raw_lines(result: Judged, label: str, cmp: Comparison, run: ServerRun) -> Iterator[str]:
    """The lines of the raw values' judgement: the rule's or the budget's."""
    dtype_note = f"dtype {run.dtype} ({run.dtype_source})"
    if result.report is not None:
        report = result.report
        assert report.budget is not None
        m = report.metrics
        yield (
            f"{report.status.upper()} {label}: budget {report.budget.name}, KLD mean {m['kld_mean']:.3g}, "
            f"max {m['kld_max']:.3g}{'' if report.exact else ' (lower bounds)'}; {dtype_note}"
        )
        yield f"  budget {report.budget}"  # its limits, and what they are relative to
        yield f"  {gate_line(report, in_process=ON_A_SERVER)}"
        if report.status == "outside":
            yield "  " + str(report).replace("\n", "\n  ")
        return
    share, where = worst_share(cmp)
    yield f"{cmp.verdict.name} {label}: worst drift {share:.2%} of the allowance ({where}); {dtype_note}"
    if not cmp.ok:
        yield "  " + str(cmp).replace("\n", "\n  ")
        if cmp.dtype_change is not None:
            old, new = cmp.dtype_change
            yield (
                f"  the server computes in {new}, the snapshot was recorded in {old}: the float rule judges a cast "
                f"as a change; judge it by a fidelity budget instead: genguard check-server {run.info.url} {label} "
                f"--budget {_preset(new)}"
            )


def background_traffic(trace: GenerationTrace, lengths: Sequence[int] = (3, 17, 40)) -> list[list[int]]:
    """Unrelated prompts of other lengths for `--load` (so batches mix sequences the snapshot does not hold): the
    snapshot's own token ids reversed and cycled, which the served vocabulary is known to hold."""
    ids = [t for p in trace.prompts for t in (*p.prompt_ids, *p.token_ids)][::-1]
    if not ids:
        return []
    return [[ids[i % len(ids)] for i in range(n)] for n in lengths]


def _mode(mapping: ServerMapping) -> str:
    """How `mapping`'s server is judged: teacher forced where it scores a given sequence, else regenerated."""
    return "teacher forced" if mapping.score is not None else "regenerated"


def _preset(dtype: str) -> str:
    return {"bfloat16": "bf16", "float16": "fp16"}.get(dtype, "bf16")


def check_traces(
    endpoint: Endpoint,
    traces: Sequence[tuple[str, GenerationTrace]],
    *,
    model: str | None = None,
    dtype: str | None = None,
    out: IO[str],
    options: CheckOptions | None = None,
    server: Server | None = None,
) -> int:
    """Judge each labelled trace against the server (probed once: `server`, else `servers.connect` here),
    `options.concurrency` at once; print one line per snapshot (in the order given) and each failure's explanation;
    return the exit code. `ServerError` propagates (bad input: exit 2), as does a `ValueError` for bad options or a
    `--write-trace` file that is not ours."""
    opts = options if options is not None else CheckOptions(model=model, dtype=dtype)
    paths = trace_paths(opts.write_trace, [label for label, _ in traces]) if opts.write_trace is not None else None
    server = server if server is not None else connect(endpoint, opts.server, opts.model)
    info = server.info
    out.write(f"genguard check-server: {info.label(_mode(server.mapping))}, model {info.model}\n")
    logprobs = _logprobs(server, traces, opts, out)

    def one(item: tuple[str, GenerationTrace]) -> Judged:
        label, trace = item
        return judge(
            endpoint,
            trace,
            label=label,
            model=opts.model,
            dtype=opts.dtype,
            server=server,
            budget=opts.budget,
            logprobs=logprobs,
            align_sampler=opts.align_sampler,
        )

    judged: list[Judged] = []
    with ThreadPoolExecutor(max_workers=opts.concurrency) as pool:
        for result in pool.map(one, traces):  # in the order given, whatever order they finish in
            judged.append(result)
            for line in _lines(result):
                out.write(line + "\n")
    if paths is not None:
        written = [(path, j.run.trace) for path, j in zip(paths, judged, strict=True) if j.run is not None]
        for path, trace in written:
            write_trace(path, trace)
        out.write(f"wrote {len(written)} server traces under {opts.write_trace}\n")
    if opts.load:
        for label, trace in traces:
            if server.mapping.score is None and SamplerSettings.of(trace.settings) is not None:
                out.write(
                    f"load {label}: not measured: {info.engine} replays no sampled path (it cannot teacher force)\n"
                )
                continue
            _, variance = batch_variance(
                endpoint,
                trace,
                clients=max(opts.concurrency, 2),
                background=background_traffic(trace),
                model=opts.model,
                server=server,
            )
            out.write(f"load {label}: " + variance.summary().replace("\n", "\n  ") + "\n")
    code = exit_code(judged)
    out.write(f"{len(judged)} snapshots: exit {code}\n")
    return code
