"""`finetune()` cold (empty cache: trains) vs warm (cache hit), default model, each in a fresh subprocess.

A fresh process per call keeps imports and in-process memos out of the other side's figure. The child reports the
time of `import torch, transformers`, of the first use of the model code the default model needs (transformers loads
`models.gpt2` etc. lazily, and that pulls in torch._dynamo, torch.distributed.tensor and sympy: it is paid once by
any process that builds a model, genguard or not), of importing pytest_genguard.hf.finetune, and of the `finetune()`
call itself. The headline is the call alone; the call with all those imports and the whole process's wall time are given
too. (`--smoke` runs both calls in its own process: it checks the code, not the fairness.)
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import Result, Spread, child_env

ROOT = Path(__file__).resolve().parent.parent
COLD_TARGET = 15.0
WARM_TARGET = 0.5


def measure(cache_dir: str, steps: int | None, calls: int, profile_to: str | None = None) -> list[dict[str, Any]]:
    """`calls` finetune() calls in this process, each call's seconds beside this process's import times (the child's
    body; `--smoke` calls it in-process)."""
    t0 = time.perf_counter()
    import torch  # noqa: F401
    import transformers  # noqa: F401

    t1 = time.perf_counter()
    from transformers import (  # noqa: F401
        AutoModelForCausalLM,
        GPT2Config,
        GPT2LMHeadModel,
        TrainerCallback,
        TrainingArguments,
    )

    t2 = time.perf_counter()
    from pytest_genguard.hf.finetune import finetune

    t3 = time.perf_counter()
    profiler: Any = None
    out_path = Path(profile_to) if profile_to is not None else None
    if out_path is not None:
        from pyinstrument import Profiler

        profiler = Profiler(interval=0.0005)
        profiler.start()
    runs = []
    for _ in range(calls):
        start = time.perf_counter()
        tuned = finetune("gpt2", cache_dir=cache_dir, steps=steps, progress=False)
        runs.append(
            {
                "import": t1 - t0,
                "import_models": t2 - t1,
                "import_genguard": t3 - t2,
                "call": time.perf_counter() - start,
                "from_cache": tuned.from_cache,
                "train_seconds": tuned.train_seconds,
            }
        )
    if out_path is not None:
        profiler.stop()
        out_path.write_text(profiler.output_text(unicode=False, color=False))
    return runs


def _child_main() -> None:
    cache_dir, steps, calls, *profile_to = sys.argv[1:]
    runs = measure(cache_dir, int(steps) if steps else None, int(calls), *profile_to)
    print(json.dumps(runs))


def _child(cache_dir: str, steps: int | None, calls: int = 1, *profile_to: str) -> list[dict[str, Any]]:
    """`measure()` in a fresh process, so imports and in-process memos do not leak from one figure to the other."""
    code = "from benchmarks.finetune_cache import _child_main; _child_main()"
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", code, cache_dir, str(steps or ""), str(calls), *profile_to],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=child_env(),
        check=False,
    )
    wall = time.perf_counter() - start
    if out.returncode != 0:
        raise RuntimeError(f"finetune benchmark child failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
    runs: list[dict[str, Any]] = json.loads(out.stdout.strip().splitlines()[-1])
    for data in runs:
        data["wall"] = wall
    return runs


def _profile_block(text: str, limit: int = 45) -> list[str]:
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    if len(lines) > limit:
        lines = [*lines[:limit], f"... ({len(lines) - limit} more lines)"]
    return ["```text", *lines, "```"]


def _stats(runs: list[dict[str, float]], field: str) -> Spread:
    return Spread(tuple(float(r[field]) for r in runs))


def run(smoke: bool) -> list[Result]:
    steps = 2 if smoke else None
    pairs = 1 if smoke else 3
    cold: list[dict[str, float]] = []
    warm: list[dict[str, float]] = []
    warm_profile: list[str] = []
    for i in range(pairs):
        with tempfile.TemporaryDirectory(prefix="genguard-bench-cache-") as cache:
            if smoke:  # in this process: the smoke run checks the code, not fresh-process fairness
                first, second = measure(cache, steps, 2)
                first["wall"] = second["wall"] = first["call"] + second["call"]
                cold.append(first)
                warm.append(second)
            else:
                cold += _child(cache, steps)
                warm += _child(cache, steps)
            entries = sum(1 for p in Path(cache).rglob("*") if p.is_file())
            if i == pairs - 1 and not smoke and statistics.median(r["call"] for r in warm) > WARM_TARGET:
                profile_path = Path(cache) / "profile.txt"
                _child(cache, steps, 1, str(profile_path))
                warm_profile = _profile_block(profile_path.read_text())
    if any(r["from_cache"] for r in cold) or not all(r["from_cache"] for r in warm):
        raise RuntimeError(f"finetune benchmark: expected cold misses and warm hits, got {cold} / {warm}")
    results = []
    for name, runs, target in (("cold", cold, COLD_TARGET), ("warm (cache hit)", warm, WARM_TARGET)):
        call = _stats(runs, "call")
        imports = _stats(runs, "import")
        models = _stats(runs, "import_models")
        ours = _stats(runs, "import_genguard")
        wall = _stats(runs, "wall")
        with_import = Spread(tuple(r["call"] + r["import"] + r["import_models"] + r["import_genguard"] for r in runs))
        notes = [
            f"the call alone (torch, transformers and its gpt2 model code already imported); with those imports: "
            f"{with_import.median:.2f} s, whole subprocess {wall.median:.2f} s (medians of {len(runs)})",
        ]
        if name == "cold":
            notes.append(f"of which training {_stats(runs, 'train_seconds').median:.2f} s (Trainer.train())")
        else:
            notes.append(f"cache entry: {entries} files")
        details = [
            f"- finetune() call, seconds min/median/max: {call.text('{:.3f}')}",
            f"- import torch, transformers: {imports.text('{:.3f}')}; first use of the model code (GPT2 config and "
            f"model, Trainer callbacks and arguments): {models.text('{:.3f}')}; "
            f"import pytest_genguard.hf.finetune: {ours.text('{:.3f}')}",
            f"- call + imports: {with_import.text('{:.3f}')}; whole subprocess (interpreter start included): "
            f"{wall.text('{:.3f}')}",
            f"- default model: gpt2, {'2 (smoke)' if smoke else 'default'} steps",
        ]
        if name != "cold" and warm_profile:
            details += ["", "Profile of one warm finetune() call (fresh process, after the imports above):", ""]
            details += warm_profile
        results.append(
            Result(
                key="finetune",
                figure=f"genguard_finetune {name}, default model",
                target=f"≤ {target:g} s",
                spread=call,
                unit=" s",
                headline=f"{call.median:.2f} s",
                met=call.median <= target,
                notes=notes,
                details=details,
            )
        )
    return results
