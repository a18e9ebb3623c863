"""pytest start-up with the plugin installed vs disabled (`-p no:genguard`): `pytest --co` over 100 trivial tests.

pytest loads every installed plugin in every project, so this is what pytest-genguard costs people who never use
it. Alternating subprocesses in a temporary project outside the repository; the figure is the median of per-pair
differences.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

from benchmarks.harness import Paired, Result, Spread, child_env, ms, repeat

TESTS = 100
TARGET_MS = 40.0
BASE = ("-m", "pytest", "--co", "-q", "-p", "no:cacheprovider")


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run(cwd: Path, env: dict[str, str], *extra: str) -> tuple[float, float, str]:
    """Wall seconds, CPU seconds (user + system) and output of one pytest run."""
    cpu = _children_cpu()
    start = time.perf_counter()
    out = subprocess.run([sys.executable, *BASE, *extra], cwd=cwd, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    cpu = _children_cpu() - cpu
    if out.returncode != 0:
        raise RuntimeError(f"start-up benchmark: pytest {' '.join(extra)} failed:\n{out.stdout[-2000:]}{out.stderr}")
    return seconds, cpu, out.stdout


def _plugin_loaded(cwd: Path, env: dict[str, str], *extra: str) -> bool:
    args = [sys.executable, "-m", "pytest", "--help", *extra]
    out = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    return "--genguard-gpu" in out.stdout


def run(smoke: bool) -> list[Result]:
    pairs = 1 if smoke else 20
    warmup = 0 if smoke else 2
    env = child_env()
    with tempfile.TemporaryDirectory(prefix="genguard-bench-startup-") as tmp:
        root = Path(tmp)
        body = "\n\n".join(f"def test_trivial_{i}():\n    pass" for i in range(TESTS))
        (root / "test_trivial.py").write_text(body + "\n")
        (root / "pytest.ini").write_text("[pytest]\n")
        if not smoke and (not _plugin_loaded(root, env) or _plugin_loaded(root, env, "-p", "no:genguard")):
            raise RuntimeError("start-up benchmark: the genguard plugin is not installed, or -p no:genguard kept it")
        with_plugin: list[float] = []
        without: list[float] = []
        cpu_with: list[float] = []
        cpu_without: list[float] = []
        for i in range(warmup + pairs):
            sides = ((), ("-p", "no:genguard"))
            for extra in sides if i % 2 == 0 else sides[::-1]:
                seconds, cpu, stdout = _run(root, env, *extra)
                if f"{TESTS} tests collected" not in stdout:
                    raise RuntimeError(f"start-up benchmark: expected {TESTS} tests collected, got:\n{stdout[-500:]}")
                if i >= warmup:
                    (without if extra else with_plugin).append(seconds)
                    (cpu_without if extra else cpu_with).append(cpu)
    paired = Paired(Spread(tuple(with_plugin)), Spread(tuple(without)))
    header = repeat(lambda: [metadata.version(d) for d in ("torch", "transformers", "syrupy")], 3 if smoke else 20)
    diff_ms = paired.differences.scaled(1000)
    cpu_ms = Paired(Spread(tuple(cpu_with)), Spread(tuple(cpu_without))).differences.scaled(1000)
    notes = [
        f"pytest --co: {ms(paired.a.median)} with the plugin vs {ms(paired.b.median)} with -p no:genguard "
        f"(medians of {pairs} alternating pairs, {TESTS} trivial tests)",
        f"CPU time (user + system) difference: {cpu_ms.median:+.1f} ms median, less disturbed by other load",
    ]
    details = [
        f"- with the plugin, seconds min/median/max: {paired.a.text('{:.3f}')}",
        f"- -p no:genguard, seconds min/median/max: {paired.b.text('{:.3f}')}",
        f"- CPU-time difference per pair, ms min/median/max: {cpu_ms.text('{:.1f}')}",
        "- syrupy and the other installed plugins load on both sides; only pytest-genguard differs",
        "- children run with bytecode caching on (PYTHONDONTWRITEBYTECODE removed), as an installed copy would",
        f"- not in this figure: `-q` hides the report header, whose three package-version lookups "
        f"(`importlib.metadata.version`) cost {ms(header.median)} more on a run without `-q`",
    ]
    return [
        Result(
            key="startup",
            figure="pytest start-up (--co, 100 trivial tests), plugin vs -p no:genguard",
            target=f"≤ +{TARGET_MS:.0f} ms",
            spread=diff_ms,
            unit=" ms",
            headline=f"{diff_ms.median:+.1f} ms",
            met=diff_ms.median <= TARGET_MS,
            notes=notes,
            details=details,
        )
    ]
