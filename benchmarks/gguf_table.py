"""docs/engines.md's llama.cpp table: SmolLM2-135M-Instruct's GGUF files (the converter's F32, BF16 and Q8_0, the
shipped Q4_1, and three bug copies made with gguf-py's scripts) teacher forced along transformers' float32 greedy
paths, against transformers' float32 logits over the full vocabulary (float64 log-softmax).

Not part of `python -m benchmarks` (it needs the llama_cpp extra and about 5 minutes):
    OMP_NUM_THREADS=1 python benchmarks/gguf_table.py [--steps 64]
Prints a Markdown table: KLD(reference || GGUF) mean, p99 and max per position, top-1 agreement, the largest
|dlogprob| of the path's token, and which calibrated preset (genguard's own int8 / int4 conversion, 4x mean and 6x p99;
`pytest_genguard.core.budget`) the trace holds.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

from gguf_support import PROMPTS, log_softmax

from pytest_genguard import calibrate, record
from pytest_genguard.core.budget import PRESETS, traces_report
from pytest_genguard.core.compare import compare
from pytest_genguard.engines import engine
from pytest_genguard.engines.llama_cpp import load, metadata_script
from pytest_genguard.hf.smollm2 import gguf_path, smollm2_folder


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=64)
    args = parser.parse_args()
    folder = smollm2_folder()
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    reference = record(model, tokenizer, PROMPTS, max_new_tokens=args.steps, top_k=5, do_sample=False)
    reference = calibrate(model, tokenizer, reference, precisions=("int8", "int4"))
    sequences = [list(p.prompt_ids) + [s.token_id for s in p.steps] for p in reference.prompts]
    with torch.no_grad():
        ref_logits = [model(torch.tensor([s])).logits[0].numpy() for s in sequences]
    steps = sum(len(p.steps) for p in reference.prompts)
    print(f"reference: {len(PROMPTS)} prompts, {steps} greedy steps; calibration {dict(reference.calibration)}")
    work = Path(tempfile.mkdtemp())
    files: dict[str, Path] = {}
    for outtype in ("f32", "bf16", "q8_0"):
        start = time.perf_counter()
        files[outtype.upper()] = engine("llama_cpp", outtype=outtype).convert(folder) / "model.gguf"
        print(f"convert {outtype}: {time.perf_counter() - start:.1f} s (cached after the first run)")
    files["Q4_1 (shipped)"] = gguf_path()
    for name, (script, extra) in {
        "bug: rms eps 1e-5 -> 1e-4": ("gguf_set_metadata", ["llama.attention.layer_norm_rms_epsilon", "1e-4"]),
        "bug: rope freq_base 1e5 -> 1e4": ("gguf_set_metadata", ["llama.rope.freq_base", "10000"]),
        "bug: tokenizer.ggml.pre smollm -> default": ("gguf_new_metadata", ["--pre-tokenizer", "default"]),
    }.items():
        out = work / f"{script}-{len(files)}.gguf"
        if script == "gguf_set_metadata":
            shutil.copyfile(files["F32"], out)
            command = [sys.executable, str(metadata_script(script)), str(out), *extra, "--force"]
        else:
            command = [sys.executable, str(metadata_script(script)), str(files["F32"]), str(out), *extra, "--force"]
        subprocess.run(command, check=True, capture_output=True)
        files[name] = out
    for preset in ("int8", "int4"):
        print(f"{preset} calibrated: {PRESETS[preset].calibrated(reference.calibration)}")
    print(
        "| GGUF | KV cache | KLD mean | p99 | max | same top-1 | max abs dlogprob on the path | float32 rule "
        "| trace KLD mean, p99 (top-5 lower bound) | holds |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, path in files.items():
        for kv in ("f16", "f32"):
            if kv == "f32" and name not in ("F32", "bug: rms eps 1e-5 -> 1e-4"):
                continue
            start = time.perf_counter()
            logits = load(path, kv)([s[:-1] for s in sequences])
            klds, same, dlp = [], [], []
            for p, ref, got in zip(reference.prompts, ref_logits, logits, strict=True):
                first = len(p.prompt_ids) - 1
                a = log_softmax(ref[first : first + len(p.steps)])
                b = log_softmax(got[first : first + len(p.steps)])
                klds += list((numpy.exp(a) * (a - b)).sum(axis=-1))
                same += list(a.argmax(-1) == b.argmax(-1))
                ids = [s.token_id for s in p.steps]
                dlp += list(numpy.abs(a[numpy.arange(len(ids)), ids] - b[numpy.arange(len(ids)), ids]))
            took = time.perf_counter() - start
            trace = engine("llama_cpp", kv_cache=kv).record(folder, reference=reference, converted=path)
            rule = "holds" if compare(reference, trace).ok else "fails"
            held = [p for p in ("int8", "int4") if traces_report(reference, trace, PRESETS[p]).holds]
            metrics = traces_report(reference, trace, None).metrics
            k = numpy.asarray(klds)
            print(
                f"| {name} | {kv} | {k.mean():.2g} | {numpy.quantile(k, 0.99):.2g} | {k.max():.2g} | "
                f"{100 * numpy.mean(same):.1f}% | {max(dlp):.2g} | {rule} | "
                f"{metrics['kld_mean']:.2g}, {metrics['kld_p99']:.2g} | {', '.join(held) or 'neither'} |"
                f"  <!-- {took:.1f} s -->"
            )


if __name__ == "__main__":
    main()
