"""Timing, results and the RESULTS.md table: the parts every figure shares.

Absolute timings on a shared 2-core machine move with the load; ratios of two things timed alternately in one process
(or alternating subprocesses) do not move much. So each figure times its two sides in alternation and reports the
median of the per-pair ratios (or differences), with min/median/max of the samples.
"""

from __future__ import annotations

import gc
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Spread:
    """min / median / max of some samples (seconds, ratios, bytes...)."""

    samples: tuple[float, ...]

    @property
    def min(self) -> float:
        return min(self.samples)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def max(self) -> float:
        return max(self.samples)

    def scaled(self, factor: float) -> Spread:
        return Spread(tuple(s * factor for s in self.samples))

    def text(self, fmt: str = "{:.3g}", unit: str = "") -> str:
        return f"{fmt.format(self.min)} / {fmt.format(self.median)} / {fmt.format(self.max)}{unit}"


@dataclass
class Result:
    """One row of the table: a figure, its samples, the headline value compared with the target, and the story."""

    key: str
    figure: str
    target: str
    spread: Spread | None
    """The samples the min/median/max columns show (for a ratio figure: the per-pair ratios)."""
    unit: str
    headline: str
    """The number compared with the target, as text (e.g. "31.2× faster")."""
    met: bool | None
    """True/False against the target; None for report-only figures."""
    notes: list[str] = field(default_factory=list)
    details: list[str] = field(default_factory=list)
    """Markdown lines for the figure's section below the table (absolute times, breakdowns, profiles)."""


COLLECT = True
"""Run a full garbage collection before each timed call (off in --smoke: with torch loaded it costs more than the
tiny calls it precedes)."""


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """Seconds one call takes, with the garbage collector off during the call (as timeit does)."""
    if COLLECT:
        gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.perf_counter()
        value = fn()
        return time.perf_counter() - start, value
    finally:
        if enabled:
            gc.enable()


def repeat(fn: Callable[[], Any], n: int, warmup: int = 1) -> Spread:
    """`n` timed calls after `warmup` untimed ones."""
    for _ in range(warmup):
        fn()
    return Spread(tuple(timed(fn)[0] for _ in range(n)))


@dataclass(frozen=True)
class Paired:
    """Alternating timings of two callables: each side's seconds and the per-pair ratios a/b and differences a-b."""

    a: Spread
    b: Spread

    @property
    def ratios(self) -> Spread:
        return Spread(tuple(x / y for x, y in zip(self.a.samples, self.b.samples, strict=True)))

    @property
    def differences(self) -> Spread:
        return Spread(tuple(x - y for x, y in zip(self.a.samples, self.b.samples, strict=True)))


def alternate(a: Callable[[], Any], b: Callable[[], Any], n: int, warmup: int = 1) -> Paired:
    """Time `a` and `b` in alternation `n` times (the order flips every pair, so neither side always runs second)."""
    for _ in range(warmup):
        a()
        b()
    ta: list[float] = []
    tb: list[float] = []
    for i in range(n):
        if i % 2 == 0:
            ta.append(timed(a)[0])
            tb.append(timed(b)[0])
        else:
            tb.append(timed(b)[0])
            ta.append(timed(a)[0])
    return Paired(Spread(tuple(ta)), Spread(tuple(tb)))


def ratio_row(key: str, figure: str, paired: Paired, headline: str, notes: list[str]) -> Result:
    """A reported (no target) row of an A/B timing: the per-pair ratios a/b as its spread, in ×."""
    return Result(
        key=key,
        figure=figure,
        target="report",
        spread=paired.ratios,
        unit="×",
        headline=headline,
        met=None,
        notes=notes,
    )


def child_env() -> dict[str, str]:
    """The environment for benchmark subprocesses: no inherited pytest/genguard settings, and bytecode caching on
    (PYTHONDONTWRITEBYTECODE would make every child recompile pytest-genguard from source, which no installed copy
    does)."""
    drop = ("PYTEST_", "GENGUARD_", "PYTHONDONTWRITEBYTECODE")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def secs(seconds: float) -> str:
    return f"{seconds:.3g} s"


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "missing"


def machine() -> list[str]:
    """Markdown bullet lines that say where the figures were taken."""
    try:
        mem = next(
            line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal")
        )
        memory = f"{int(mem) / 1024 / 1024:.0f} GiB"
    except (OSError, StopIteration, ValueError):
        memory = "n/a"
    torch = sys.modules.get("torch")  # loaded by every figure that uses it; not imported just for this line
    threads = str(torch.get_num_threads()) if torch is not None else "n/a (torch not loaded)"
    versions = ", ".join(f"{d} {_version(d)}" for d in ("torch", "transformers", "pytest", "syrupy", "pytest-genguard"))
    return [
        f"- CPU: {cpu_model()}, {os.cpu_count()} cores visible, torch threads {threads}, memory {memory}",
        f"- Python {platform.python_version()} on {platform.system()} {platform.release()}; {versions}",
    ]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(results: Sequence[Result], *, command: str, started: str, load_before: str, load_after: str) -> str:
    """The RESULTS.md text: how it was made, the table, then one section per figure."""
    status = {True: "met", False: "**missed**", None: "report"}
    lines = [
        "# pytest-genguard benchmarks",
        "",
        f"Made by `{command}` on {started}. Regenerate with `python -m benchmarks` (about 10 minutes; "
        "`--only NAME` for one figure, `--smoke` for the tiny CI check).",
        "",
        *machine(),
        f"- Load average (1/5/15 min) before: {load_before}; after: {load_after}",
        "",
        "Ratios are medians of per-pair ratios of alternating runs in one process (or alternating subprocesses), "
        "so they hold up on a loaded machine better than the absolute times, which are given in each section.",
        "",
        "| figure | min / median / max | result | target | status | notes |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        spread = r.spread.text(unit=r.unit) if r.spread is not None else "–"
        note = _cell("; ".join(r.notes[:1]))
        lines.append(
            f"| {_cell(r.figure)} | {spread} | {_cell(r.headline)} | {_cell(r.target)} | {status[r.met]} | {note} |"
        )
    for r in results:
        lines += ["", f"## {r.figure}", "", f"`--only {r.key}` · target: {r.target} · {status[r.met]}", ""]
        lines += [f"- {n}" for n in r.notes]
        if r.details:
            lines += ["", *r.details]
    return "\n".join(lines) + "\n"


def write_atomic(path: Path, text: str) -> None:
    """Write through a temporary file and os.replace: a reader never sees half a table."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")


def profile(fn: Callable[[], Any], *, calls: int = 1, limit: int = 45) -> list[str]:
    """A pyinstrument call tree of `calls` calls of `fn` (several, so the shares are not one call's noise), as a
    markdown code block: the evidence for a missed target."""
    try:
        from pyinstrument import Profiler
    except ImportError:
        return ["(pyinstrument is not installed: no profile)"]
    profiler = Profiler(interval=0.0002)
    profiler.start()
    try:
        for _ in range(calls):
            fn()
    finally:
        profiler.stop()
    text = profiler.output_text(unicode=False, color=False, show_all=False)
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    if len(lines) > limit:
        lines = [*lines[:limit], f"... ({len(lines) - limit} more lines)"]
    return ["```text", *lines, "```"]
