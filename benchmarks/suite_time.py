"""The project's own test suite on 2 cores: `pytest -n 2 -q` over tests/, once, wall clock.

Only meaningful on a quiet machine (the load average before and after is in the notes). `--smoke` runs one fast
test instead of the suite so the CI check stays cheap; its figure says so.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.harness import Result, Spread, child_env, loadavg

ROOT = Path(__file__).resolve().parent.parent
TARGET = 180.0
SMOKE_SELECTION = ("tests/plugin/test_import_cost.py", "-k", "unknown_attribute")


def run(smoke: bool) -> list[Result]:
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=8"]
    args += list(SMOKE_SELECTION) if smoke else ["-n", "2", "tests"]
    env = child_env()
    before = loadavg()
    start = time.perf_counter()
    out = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    after = loadavg()
    lines = out.stdout.strip().splitlines()
    summary = lines[-1] if lines else "(no output)"
    if out.returncode not in (0, 1) or not re.search(r"\d+ (passed|failed)", summary):
        tail = out.stdout[-3000:] + out.stderr[-2000:]
        raise RuntimeError(f"suite benchmark: pytest exited {out.returncode}:\n{tail}")
    slowest = []
    if "slowest" in out.stdout:
        block = out.stdout.split("slowest", 1)[1].splitlines()[1:]
        slowest = [f"  - `{line.strip()}`" for line in block if re.match(r"\s*\d+\.\d+s ", line)][:8]
    what = "one test (smoke)" if smoke else "tests/ with -n 2"
    return [
        Result(
            key="suite",
            figure="the project's test suite, pytest -n 2, 2 cores" if not smoke else "test suite (smoke: one test)",
            target=f"≤ {TARGET / 60:.0f} min",
            spread=Spread((seconds,)),
            unit=" s",
            headline=f"{seconds:.0f} s ({summary.strip('= ')})",
            met=seconds <= TARGET if out.returncode == 0 else False,
            notes=[f"{what}, one run; load average before {before}, after {after}"],
            details=["- slowest tests (`--durations=8`):", *slowest] if slowest else [],
        )
    ]
