"""The long probe and every-step judging of GGUF files (docs/engines.md, "Every step, and the long probe"): per file,
how check-gguf judges it with the reference model in process (``--model``: exact, every step, the long probe) and
without it (the snapshot's top-5 bounds, every step, against a calibrated and an uncalibrated snapshot), and what the
probe costs.

Files: the sliding-window model of the tests (tests/support/swa_model.py: Gemma 3 text, window 16) as llama.cpp's
converter and quantizer make it (Q8_0, Q4_K_M), with its global rope base (1e6 -> 1e5) or its window (16 -> 32)
edited; SmolLM2-135M-Instruct's Q8_0 and Q4_K_M, with its rope base edited (1e5 -> 2e5). Snapshots: 3 short prompts
of 6 greedy steps (the sliding-window model: within its window) or the engine tests' prompts of 32 steps (SmolLM2),
top-5, calibrated (int8). The cost: the judgement with its probe against the same without (alternating pairs, the
median ratio), cold (the probe's reference side and its calibration computed), warm (kept: the session's case) and
stored (a later run, or CI's: the file's probe read from genguard's cache by its bytes).
Not part of `python -m benchmarks` (it needs the llama_cpp extra; about 10 minutes):
    OMP_NUM_THREADS=1 PYTHONPATH=.:tests/support python benchmarks/long_probe.py [--pairs 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable from the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
from gguf_support import PROMPTS, edited
from swa_model import save_swa_model
from transformers import AutoModelForCausalLM, AutoTokenizer

from benchmarks.harness import alternate, loadavg, machine, timed
from pytest_genguard import calibrate, record
from pytest_genguard.core.gate import STATUS_EXIT
from pytest_genguard.engines import engine
from pytest_genguard.engines.gguf_check import GGUFJudge
from pytest_genguard.hf import long_probe
from pytest_genguard.hf.smollm2 import smollm2_folder

SHORT = ["The history of", "We hold these", "Four score and"]


def _judge(path: Path, model: Any, tokenizer: Any, folder: Path | None, probe: bool = True) -> GGUFJudge:
    from pytest_genguard.engines.llama_cpp import file_type  # llama-cpp-python: with the GGUF rows only

    return GGUFJudge(path, "f16", file_type(path), model, tokenizer, engine("llama_cpp"), folder, probe)


def _row(name: str, path: Path, model: Any, tokenizer: Any, folder: Path, snapshot: Any) -> str:
    exact = _judge(path, model, tokenizer, folder).judge(snapshot).report
    bounded = _judge(path, model, tokenizer, None)
    calibrated = bounded.judge(snapshot).report
    uncalibrated = bounded.judge(dataclasses.replace(snapshot, calibration={})).report
    assert exact is not None and calibrated is not None and uncalibrated is not None and exact.probe is not None
    m, b, p = exact.metrics, calibrated.metrics, exact.probe.metrics
    steps = f"{int(m['steps'])}/{int(m['steps']) + exact.skipped}"
    start = next((s for s in exact.probe_lines() if "divergence starts" in s), "")
    where = start.split("positions ")[1].split(":")[0] if start else "none"
    limit = exact.probe.budget.kld_mean if exact.probe.budget is not None else None
    return (
        f"| {name} ({bounded.file_type}) | {steps} | {m['kld_mean']:.2g}, {m['kld_p99']:.2g} ({exact.own_status}) | "
        f"{b['kld_mean']:.2g}, {b['kld_p99']:.2g} | {p['kld_mean']:.2g}, {p['kld_p99']:.2g}, max {p['kld_max']:.2g} "
        f"(limit {limit:.2g}; starts {where}) | {exact.probe.status} | exit {STATUS_EXIT[exact.status]} | "
        f"exit {STATUS_EXIT[calibrated.status]} | exit {STATUS_EXIT[uncalibrated.status]} |"
    )


def _cost(path: Path, model: Any, tokenizer: Any, folder: Path, snapshot: Any, pairs: int) -> list[str]:
    def with_probe() -> None:
        _judge(path, model, tokenizer, folder).judge(snapshot)

    def without() -> None:
        _judge(path, model, tokenizer, folder, probe=False).judge(snapshot)

    def stored() -> None:  # a later run: the same bytes under a path this process never read, its probe in the cache
        with tempfile.TemporaryDirectory() as where:
            link = Path(where) / path.name
            os.link(path, link)
            _judge(link, model, tokenizer, folder).judge(snapshot)

    with_probe()  # stored under the default cache folder, if not there yet
    later = alternate(stored, without, pairs)
    return [
        *_cold_then_warm(with_probe, without, pairs),
        f"stored (a later run: the file's probe read from genguard's cache by its bytes, hf.probe_store): "
        f"{later.ratios.text('{:.2f}', '×')} ({later.a.median:.1f} s vs {later.b.median:.1f} s)",
    ]


def _cold_then_warm(with_probe: Callable[[], None], without: Callable[[], None], pairs: int) -> list[str]:
    """The probe's cost: once cold (its reference side and the calibration on it computed), then warm (kept per model
    state), in alternating pairs against the same check without it."""
    long_probe.forget()
    with tempfile.TemporaryDirectory() as empty, mock.patch.dict(os.environ, {"GENGUARD_CACHE_DIR": empty}):
        cold, _ = timed(with_probe)  # the calibration's store empty too: a first run's cost
    alone, _ = timed(without)
    warm = alternate(with_probe, without, pairs)
    return [
        f"cold (reference side and its int8 calibration computed): {cold:.1f} s with the probe, {alone:.1f} s without",
        f"warm (kept per model): {warm.ratios.text('{:.2f}', '×')} (min / median / max of {pairs} pairs; "
        f"{warm.a.median:.1f} s vs {warm.b.median:.1f} s)",
    ]


def torch_cost(pairs: int) -> list[str]:
    """`fidelity(copy, reference_model=)` on SmolLM2 (its int8 reference copy, the engine tests' snapshot) with the
    probe against without it: cold, then warm (alternating pairs)."""
    from pytest_genguard import fidelity
    from pytest_genguard.hf.reference_copies import reference_copy

    folder = smollm2_folder()
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    snapshot = record(model, tokenizer, PROMPTS, max_new_tokens=32, top_k=5, do_sample=False)
    copy = reference_copy(model, "int8")

    def with_probe() -> None:
        fidelity(copy, tokenizer, snapshot, budget="int8", reference_model=model)

    def without() -> None:
        fidelity(copy, tokenizer, snapshot, budget="int8", reference_model=model, probe=False)

    return _cold_then_warm(with_probe, without, pairs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--torch-only", action="store_true", help="only fidelity()'s probe cost (no llama.cpp)")
    args = parser.parse_args()
    print("\n".join(machine()), f"\nload average before: {loadavg()}")
    print("\nthe probe's cost in fidelity(int8 copy, reference_model=) on SmolLM2-135M-Instruct:")
    print("\n".join(f"- {line}" for line in torch_cost(args.pairs)), flush=True)
    if args.torch_only:
        return
    work = Path(tempfile.mkdtemp())
    sides = []
    swa_folder = save_swa_model(work / "swa")
    sides.append(
        (
            "sliding-window model",
            swa_folder,
            SHORT,
            6,
            {"gemma3.rope.freq_base": "100000", "gemma3.attention.sliding_window": "32"},
        )
    )
    sides.append(("SmolLM2-135M-Instruct", smollm2_folder(), PROMPTS, 32, {"llama.rope.freq_base": "200000"}))
    print(
        "\n| GGUF | steps compared | exact KLD mean, p99 (snapshot) | bound mean, p99 (calibrated) | probe KLD mean, "
        "p99, max | probe | --model | no --model, calibrated | no --model, uncalibrated |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    costs = []
    for label, folder, prompts, steps, edits in sides:
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
        tokenizer = AutoTokenizer.from_pretrained(folder)
        snapshot = record(model, tokenizer, prompts, max_new_tokens=steps, top_k=5, do_sample=False)
        snapshot = calibrate(model, tokenizer, snapshot, precisions=("int8",))
        for outtype in ("q8_0", "q4_k_m"):
            path = Path(engine("llama_cpp", outtype=outtype).convert(folder)) / "model.gguf"
            print(_row(f"{label}", path, model, tokenizer, folder, snapshot), flush=True)
            for key, value in edits.items():
                where = work / f"{label[:5]}-{outtype}-{key}"
                where.mkdir()
                bad = edited(path, where, "gguf_set_metadata", key, value)
                print(_row(f"*edit:* {label}, {key} -> {value}", bad, model, tokenizer, folder, snapshot), flush=True)
        path = Path(engine("llama_cpp", outtype="q4_k_m").convert(folder)) / "model.gguf"
        costs.append((label, _cost(path, model, tokenizer, folder, snapshot, args.pairs)))
    for label, lines in costs:
        print(f"\nthe probe's cost on {label}'s Q4_K_M (check-gguf --model's judgement of the snapshot):")
        print("\n".join(f"- {line}" for line in lines))
    print(f"\nload average after: {loadavg()}")


if __name__ == "__main__":
    main()
