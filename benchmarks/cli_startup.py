"""`genguard show` and `genguard diff` on a snapshot: the whole console script, start to exit, in a fresh interpreter.

Each command runs as the console script runs it (`from pytest_genguard.cli import main; sys.exit(main())`), in
alternation with the same command run as the script did before it imported subcommands on demand: every subcommand's
module imported first (`cli.build_parser(full=True)`, which loads the HTTP side, the engines' GGUF check and their
imports). The headline is the median CPU time of the command, user and system (target: 0.3 s on a quiet machine,
where a single-threaded start-up's wall time is its CPU time; on a loaded machine the wall time waits for a core,
and is given beside it); the ratio to the eager form, and the project modules each imports, are beside it. A bare
`python -c pass` gives the interpreter's own share.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.harness import Paired, Result, Spread, child_env, loadavg, ms

TARGET_S = 0.3
ROOT = Path(__file__).resolve().parent.parent
SNAPSHOT = ROOT / "examples" / "__snapshots__" / "test_decoding" / "test_greedy_path.genguard"

_LAZY = "import sys\nfrom pytest_genguard.cli import main\nsys.exit(main())\n"
_EAGER = "import sys\nfrom pytest_genguard import cli\ncli.build_parser(full=True)\nsys.exit(cli.main())\n"
_COUNT = """
import contextlib, io, json, sys
from pytest_genguard import cli
if sys.argv[1] == "eager":
    cli.build_parser(full=True)
with contextlib.redirect_stdout(io.StringIO()):
    cli.main(sys.argv[2:])
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] == "pytest_genguard")))
"""


def _run(code: str, argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of one run, start to exit."""
    start = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-c", code, *argv],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert child.stderr is not None
    err = child.stderr.read()
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - start
    if child.returncode != 0:
        raise RuntimeError(f"genguard {' '.join(argv[:1])} exited {child.returncode}: {err[-1000:]!r}")
    return seconds, usage.ru_utime + usage.ru_stime


def _modules(form: str, argv: list[str], env: dict[str, str]) -> int:
    done = subprocess.run(
        [sys.executable, "-c", _COUNT, form, *argv], env=env, cwd=ROOT, capture_output=True, text=True, check=True
    )
    return len(json.loads(done.stdout.strip().splitlines()[-1]))


def _pairs(argv: list[str], env: dict[str, str], pairs: int, warmup: int) -> tuple[Paired, Paired]:
    """Alternating runs on demand (a) and eager (b): (CPU seconds, wall seconds)."""
    lazy: list[tuple[float, float]] = []
    eager: list[tuple[float, float]] = []
    for i in range(warmup + pairs):
        order = ((_LAZY, lazy), (_EAGER, eager)) if i % 2 == 0 else ((_EAGER, eager), (_LAZY, lazy))
        for code, samples in order:
            seconds = _run(code, argv, env)
            if i >= warmup:
                samples.append(seconds)
    cpu = Paired(Spread(tuple(c for _, c in lazy)), Spread(tuple(c for _, c in eager)))
    wall = Paired(Spread(tuple(w for w, _ in lazy)), Spread(tuple(w for w, _ in eager)))
    return cpu, wall


def run(smoke: bool) -> list[Result]:
    pairs, warmup = (1, 0) if smoke else (20, 2)
    env = child_env()
    bare_runs = [_run("pass", [], env) for _ in range(1 if smoke else 10)]
    bare, bare_wall = Spread(tuple(c for _, c in bare_runs)), Spread(tuple(w for w, _ in bare_runs))
    results = []
    for name, argv in (("show", ["show", str(SNAPSHOT)]), ("diff", ["diff", str(SNAPSHOT), str(SNAPSHOT)])):
        load = loadavg()
        paired, wall = _pairs(argv, env, pairs, warmup)
        lazy_modules, eager_modules = _modules("lazy", argv, env), _modules("eager", argv, env)
        median = paired.a.median
        results.append(
            Result(
                key="cli",
                figure=f"genguard {name} on a snapshot (console script, start to exit, CPU time)",
                target=f"≤ {TARGET_S} s quiet",
                spread=paired.a,
                unit=" s",
                headline=(
                    f"{median:.3f} s CPU ({paired.ratios.median:.2f}× the eager script's {paired.b.median:.3f} s); "
                    f"{lazy_modules} project modules (eager {eager_modules})"
                ),
                met=median <= TARGET_S,
                notes=[
                    f"imports a subcommand's module only when it runs: {lazy_modules} of genguard's modules vs "
                    f"{eager_modules} with every subcommand imported first ({len(paired.a.samples)} alternating "
                    f"pairs, per-pair CPU-time ratio {paired.ratios.text('{:.2f}')})",
                    f"wall time {wall.a.median:.3f} s (eager {wall.b.median:.3f} s) at a load average of {load}; "
                    f"the interpreter alone (python -c pass) {ms(bare.median)} CPU, {ms(bare_wall.median)} wall",
                ],
                details=[
                    f"- genguard {name}, CPU seconds min/median/max: {paired.a.text('{:.3f}')}",
                    f"- every subcommand imported first, CPU seconds min/median/max: {paired.b.text('{:.3f}')}",
                    f"- per-pair CPU-time ratio (on demand / eager) min/median/max: {paired.ratios.text('{:.2f}')}",
                    f"- genguard {name}, wall seconds min/median/max: {wall.a.text('{:.3f}')}",
                    f"- every subcommand imported first, wall seconds min/median/max: {wall.b.text('{:.3f}')}",
                    f"- python -c pass, CPU seconds min/median/max: {bare.text('{:.3f}')}; wall: "
                    f"{bare_wall.text('{:.3f}')}",
                    f"- snapshot: {SNAPSHOT.relative_to(ROOT)}",
                ],
            )
        )
    return results
