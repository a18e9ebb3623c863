"""`finetune()` cold (empty cache: trains) vs warm (cache hit), default model, each in a fresh subprocess.

A fresh process per call keeps imports and in-process memos out of the other side's figure. The child reports the
time of `import torch, transformers`, of the first use of the model code the default model needs (transformers loads
`models.gpt2` etc. lazily, and that pulls in torch._dynamo, torch.distributed.tensor and sympy: it is paid once by
any process that builds a model, genguard or not), of importing pytest_genguard.finetune, and of the `finetune()` call
itself. The headline is the call alone; the call with all those imports and the whole process's wall time are given
too.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness import Result, Spread, child_env

COLD_TARGET = 15.0
WARM_TARGET = 0.5

_CHILD = """
import json, sys, time
t0 = time.perf_counter()
import torch, transformers
t1 = time.perf_counter()
from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, TrainerCallback, TrainingArguments
t15 = time.perf_counter()
from transformers import LlamaConfig, T5Config  # tiny._config imports them whatever the arch
t2 = time.perf_counter()
from pytest_genguard.finetune import finetune
t3 = time.perf_counter()
profiler = None
if len(sys.argv) > 4:
    from pyinstrument import Profiler
    profiler = Profiler(interval=0.0005)
    profiler.start()
for call in range(int(sys.argv[3])):
    start = time.perf_counter()
    tuned = finetune("gpt2", cache_dir=sys.argv[1], steps=int(sys.argv[2]) if sys.argv[2] else None, progress=False)
    end = time.perf_counter()
    print(json.dumps({"import": t1 - t0, "import_models": t2 - t1, "import_other_configs": t2 - t15,
                      "import_genguard": t3 - t2, "call": end - start, "from_cache": tuned.from_cache,
                      "train_seconds": tuned.train_seconds}))
if profiler is not None:
    profiler.stop()
    with open(sys.argv[4], "w") as handle:
        handle.write(profiler.output_text(unicode=False, color=False))
"""


def _child(cache_dir: str, steps: int | None, calls: int = 1, *profile_to: str) -> list[dict[str, float]]:
    """`calls` finetune() calls in one fresh process: each call's times (the imports are the process's)."""
    env = child_env()
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, cache_dir, str(steps or ""), str(calls), *profile_to],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    wall = time.perf_counter() - start
    if out.returncode != 0:
        raise RuntimeError(f"finetune benchmark child failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
    runs: list[dict[str, float]] = [json.loads(line) for line in out.stdout.strip().splitlines()[-calls:]]
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
            if smoke:  # one process for both calls: the smoke run checks the script, not fresh-process fairness
                first, second = _child(cache, steps, 2)
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
        others = _stats(runs, "import_other_configs")
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
            f"model, Trainer callbacks and arguments, Llama/T5 configs): {models.text('{:.3f}')}, of which the "
            f"Llama and T5 configs that `tiny._config` imports for any arch: {others.text('{:.3f}')}; "
            f"import pytest_genguard.finetune: {ours.text('{:.3f}')}",
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
