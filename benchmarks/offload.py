"""A model bigger than its memory (docs/big-models.md): SmolLM2-135M-Instruct in float32 dispatched by accelerate
with ``device_map="auto"``, ``max_memory`` at half its weights and an offload folder (the rest read from the
checkpoint's safetensors at each forward pass), against the same model in memory.

Each side runs in a subprocess of its own, the two alternating: it loads the model, hashes its weights cold
(`weights_hash(cached=False)`: the offloaded weights read one at a time from the file), records 2 conversations of 16
new tokens greedily (`record()`: one batched `generate()`, whose fingerprint finds the hash kept), and hashes again
(the watch: nothing read). Peak memory is the subprocess's ``ru_maxrss`` after each stage (a peak: it never falls),
less that of a subprocess that imports the same and loads the tokenizer only (the interpreter, torch and
transformers). Times are the median of the pairs; ratios are per pair.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if __package__ in (None, ""):  # run as a script (one side, in its subprocess): `benchmarks` from the repository root
    sys.path.insert(0, str(ROOT))

from benchmarks.harness import Result, Spread, child_env, ms, secs  # noqa: E402

CONVERSATIONS: list[Any] = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "user", "content": "Explain gradient descent in two sentences."}],
]
STAGES = ("load", "hash_cold", "record", "hash_warm")


def measure(mode: str, folder: str, new_tokens: int) -> dict[str, float]:
    """One side's seconds per stage and ``ru_maxrss`` (bytes) after each: mode "memory", "offloaded" or "baseline"
    (the imports and the tokenizer alone)."""
    import resource
    import tempfile

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pytest_genguard import record
    from pytest_genguard.hf.weights_hash import weights_hash

    torch.set_num_threads(1)

    def peak() -> float:
        return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)

    tokenizer = AutoTokenizer.from_pretrained(folder)
    out: dict[str, float] = {"start": peak()}
    if mode == "baseline":
        return out
    weights = (Path(folder) / "model.safetensors").stat().st_size
    out["weights"] = float(weights)
    with tempfile.TemporaryDirectory() as offload_folder:
        start = time.perf_counter()
        if mode == "memory":
            model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
        else:
            model = AutoModelForCausalLM.from_pretrained(
                folder,
                dtype=torch.float32,
                device_map="auto",
                max_memory={"cpu": weights // 2},
                offload_folder=offload_folder,
            )
            out["on_disk"] = float(list(model.hf_device_map.values()).count("disk"))
        out["load_s"], out["load"] = time.perf_counter() - start, peak()
        start = time.perf_counter()
        weights_hash(model, cached=False)
        out["hash_cold_s"], out["hash_cold"] = time.perf_counter() - start, peak()
        start = time.perf_counter()
        record(model, tokenizer, CONVERSATIONS, max_new_tokens=new_tokens, top_k=5, do_sample=False)
        out["record_s"], out["record"] = time.perf_counter() - start, peak()
        start = time.perf_counter()
        weights_hash(model)
        out["hash_warm_s"], out["hash_warm"] = time.perf_counter() - start, peak()
    return out


def _side(mode: str, folder: str, new_tokens: int) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), mode, folder, str(new_tokens)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=child_env(),
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"benchmarks/offload.py {mode} failed:\n{done.stderr[-3000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def run(smoke: bool) -> list[Result]:
    import pytest_genguard as gg

    folder = str(gg.smollm2_folder())
    new_tokens = 2 if smoke else 16
    pairs = 1 if smoke else 4
    # The smoke run walks the lines in this process (CI's leg runs it; a subprocess per side costs its imports).
    side = (lambda mode: measure(mode, folder, new_tokens)) if smoke else (lambda mode: _side(mode, folder, new_tokens))
    base = [side("baseline")["start"] for _ in range(1 if smoke else 2)]
    runs: dict[str, list[dict[str, float]]] = {"memory": [], "offloaded": []}
    for i in range(pairs):
        for mode in ("memory", "offloaded") if i % 2 == 0 else ("offloaded", "memory"):
            runs[mode].append(side(mode))
    baseline = statistics.median(base)
    weights = runs["memory"][0]["weights"]

    def spread(mode: str, key: str) -> Spread:
        return Spread(tuple(r[key] for r in runs[mode]))

    def above(mode: str, stage: str) -> float:
        return statistics.median(r[stage] for r in runs[mode]) - baseline

    def ratio(key: str) -> Spread:
        return Spread(tuple(o[key] / m[key] for o, m in zip(runs["offloaded"], runs["memory"], strict=True)))

    mib = 1 << 20
    cap = weights / 2
    peaks = {mode: max(above(mode, s) for s in STAGES) for mode in runs}
    details = [
        f"- weights {weights / mib:.0f} MiB (float32), max_memory {cap / mib:.0f} MiB; "
        f"{int(runs['offloaded'][0]['on_disk'])} of 34 modules on disk; baseline ru_maxrss "
        f"{baseline / mib:.0f} MiB (imports and tokenizer)",
        "- per stage, in memory vs offloaded: seconds (medians), peak memory above the baseline after it, and the "
        "per-pair time ratios (offloaded / in memory):",
    ]
    for stage in STAGES:
        details.append(
            f"  - {stage.replace('_', ' ')}: {secs(spread('memory', stage + '_s').median)} vs "
            f"{secs(spread('offloaded', stage + '_s').median)}; {above('memory', stage) / mib:.0f} MiB vs "
            f"{above('offloaded', stage) / mib:.0f} MiB; {ratio(stage + '_s').text('{:.3g}', '×')}"
        )
    record_ratio = ratio("record_s")
    hash_ratio = ratio("hash_cold_s")
    label = f"SmolLM2-135M-Instruct float32, 2 conversations x {new_tokens} tokens, 1 thread"
    return [
        Result(
            key="offload",
            figure=f"record(), offloaded (device_map=auto, half on disk) vs in memory, {label}",
            target="report",
            spread=record_ratio,
            unit="×",
            headline=f"{record_ratio.median:.3g}× the time",
            met=None,
            notes=[
                f"record {secs(spread('offloaded', 'record_s').median)} vs {secs(spread('memory', 'record_s').median)}"
                f" (medians of {pairs} alternating subprocess pairs)"
            ],
            details=details,
        ),
        Result(
            key="offload",
            figure=f"peak memory, offloaded vs in memory, {label}",
            target="report",
            spread=Spread(tuple(max(r[s] for s in STAGES) / mib - baseline / mib for r in runs["offloaded"])),
            unit=" MiB",
            headline=f"{peaks['offloaded'] / mib:.0f} MiB vs {peaks['memory'] / mib:.0f} MiB (cap {cap / mib:.0f} MiB)",
            met=None,
            notes=[
                "ru_maxrss above an imports-only subprocess, the highest of load, hash and record; the cold weights "
                f"hash {ms(spread('offloaded', 'hash_cold_s').median)} offloaded vs "
                f"{ms(spread('memory', 'hash_cold_s').median)} in memory ({hash_ratio.median:.3g}×), warm "
                f"{ms(spread('offloaded', 'hash_warm_s').median)} vs {ms(spread('memory', 'hash_warm_s').median)}"
            ],
        ),
    ]


if __name__ == "__main__":  # one side, in a subprocess of its own: mode, folder, new tokens
    print(json.dumps(measure(sys.argv[1], sys.argv[2], int(sys.argv[3]))))
    sys.stdout.flush()
