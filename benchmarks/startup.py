"""pytest start-up with the plugin installed vs disabled (`-p no:genguard`): `pytest --co` over 100 trivial tests.

pytest loads every installed plugin in every project, so this is what pytest-genguard costs people who never use
it. Measured three ways in a temporary project outside the repository:

- alternating `pytest --co` subprocesses, with and without `-p no:genguard` (the median of per-pair differences).
  On this VM one `pytest --co` varies by ±20% run to run (CPU time too), far more than the plugin costs, so this
  figure's standard error is given beside it;
- what the plugin adds, measured where it happens, which that noise does not reach: the import of
  `pytest_genguard.plugin` in a fresh process that has already imported pytest, plus the plugin's hooks, as the
  difference of alternating in-process `pytest.main(["--co", ...])` runs with and without `-p no:genguard` (imports
  are cached after the first run, so this difference is the hooks alone).

The headline is the second (import + hooks); the subprocess figure is reported with its error.
"""

from __future__ import annotations

import json
import statistics
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

_IMPORT = """
import time, pytest
start = time.perf_counter()
import pytest_genguard.plugin
print(time.perf_counter() - start)
"""

_HOOKS = """
import contextlib, io, json, sys, time, pytest
pairs = int(sys.argv[1])
args = ["--co", "-q", "-p", "no:cacheprovider"]
def once(extra):
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        code = pytest.main([*args, *extra])
    if code != 0:
        raise SystemExit(f"pytest.main exited {code}")
    return time.perf_counter() - start
once([]); once(["-p", "no:genguard"])
with_plugin, without = [], []
for i in range(pairs):
    for extra in ([], ["-p", "no:genguard"]) if i % 2 == 0 else (["-p", "no:genguard"], []):
        (without if extra else with_plugin).append(once(extra))
print(json.dumps([with_plugin, without]))
"""


def _python(cwd: Path, env: dict[str, str], *args: str) -> str:
    out = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        command = " ".join(args)[:80]
        raise RuntimeError(f"start-up benchmark: python {command} failed:\n{out.stdout[-2000:]}{out.stderr}")
    return out.stdout


def _pytest_run(cwd: Path, env: dict[str, str], *extra: str) -> float:
    start = time.perf_counter()
    stdout = _python(cwd, env, *BASE, *extra)
    seconds = time.perf_counter() - start
    if f"{TESTS} tests collected" not in stdout:
        raise RuntimeError(f"start-up benchmark: expected {TESTS} tests collected, got:\n{stdout[-500:]}")
    return seconds


def _plugin_loaded(cwd: Path, env: dict[str, str], *extra: str) -> bool:
    return "--genguard-gpu" in _python(cwd, env, "-m", "pytest", "--help", *extra)


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
        for i in range(warmup + pairs):
            sides = ((), ("-p", "no:genguard"))
            for extra in sides if i % 2 == 0 else sides[::-1]:
                seconds = _pytest_run(root, env, *extra)
                if i >= warmup:
                    (without if extra else with_plugin).append(seconds)
        imports = Spread(tuple(float(_python(root, env, "-c", _IMPORT)) for _ in range(1 if smoke else 15)))
        hooks_raw = json.loads(_python(root, env, "-c", _HOOKS, str(1 if smoke else 30)).strip().splitlines()[-1])
    paired = Paired(Spread(tuple(with_plugin)), Spread(tuple(without)))
    diff_ms = paired.differences.scaled(1000)
    hooks = Paired(Spread(tuple(hooks_raw[0])), Spread(tuple(hooks_raw[1])))
    hooks_ms = hooks.differences.scaled(1000)
    import_ms = imports.scaled(1000)
    added = import_ms.median + hooks_ms.median
    noise = statistics.stdev(diff_ms.samples) / len(diff_ms.samples) ** 0.5 if len(diff_ms.samples) > 1 else 0.0
    header = repeat(lambda: [metadata.version(d) for d in ("torch", "transformers", "syrupy")], 3 if smoke else 20)
    notes = [
        f"import of the plugin {import_ms.median:.1f} ms + its hooks {hooks_ms.median:+.1f} ms per run (in-process "
        f"pytest.main --co, {len(hooks_ms.samples)} alternating pairs)",
        f"alternating subprocesses: {diff_ms.median:+.1f} ms median per-pair difference, standard error "
        f"±{1.25 * noise:.0f} ms ({pairs} pairs: pytest --co {ms(paired.a.median)} with the plugin vs "
        f"{ms(paired.b.median)} without)",
    ]
    details = [
        f"- import of pytest_genguard.plugin after pytest, ms min/median/max: {import_ms.text('{:.1f}')}",
        f"- hooks, per-pair difference of in-process runs, ms min/median/max: {hooks_ms.text('{:.1f}')} "
        f"(runs {ms(hooks.a.median)} with vs {ms(hooks.b.median)} without)",
        f"- subprocess with the plugin, seconds min/median/max: {paired.a.text('{:.3f}')}",
        f"- subprocess with -p no:genguard, seconds min/median/max: {paired.b.text('{:.3f}')}",
        f"- subprocess per-pair difference, ms min/median/max: {diff_ms.text('{:.0f}')}",
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
            spread=Spread(tuple(v + hooks_ms.median for v in import_ms.samples)),
            unit=" ms",
            headline=f"{added:+.1f} ms (subprocesses: {diff_ms.median:+.0f} ± {1.25 * noise:.0f} ms)",
            met=added <= TARGET_MS,
            notes=notes,
            details=details,
        )
    ]
