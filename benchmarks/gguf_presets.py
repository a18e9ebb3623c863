"""The GGUF-type presets' measurements (docs/engines.md, `pytest_genguard.core.budget.PRESETS`, `GGUF_TYPE_PRESETS`):
SmolLM2-135M-Instruct's GGUF files made by llama.cpp's own tools (convert_hf_to_gguf.py's F32, BF16 and Q8_0;
llama_model_quantize's Q6_K, Q5_K_M, Q4_K_M and Q4_1 of the F32 file; the shipped Q4_1) and bug copies of each
quantized one (rope base 1e5 -> 1e4, RMS epsilon 1e-5 -> 1e-4, one FFN norm weight x1.1 or x1.25), teacher forced
along transformers' float32 greedy paths of the engine tests' prompts (tests/support/gguf_support.py).

Per file: the exact KLD(transformers || llama.cpp) over the full vocabulary (float64 log-softmax: mean, p99, max),
top-1 agreement, the trace's top-5 lower bounds that a snapshot judges (`traces_report`: each path up to the first
step where llama.cpp prefers another greedy token, as generation through it would go), those as multiples of the
reference's own calibration bounds (int8 and int4, the same lower bounds of genguard's own conversions), and which
presets hold. Not part of `python -m benchmarks` (it needs the llama_cpp extra; about 7 minutes):
    OMP_NUM_THREADS=1 PYTHONPATH=.:tests/support python benchmarks/gguf_presets.py [--steps 32] [--off-grid 0.1]

SmolLM2's float32 folder is its shipped Q4_1 file dequantized: its weights lie on Q4_1's grid. ``--off-grid SIGMA``
measures a copy whose every matrix moved off it (Gaussian noise of SIGMA times the matrix's own standard deviation,
seed 0; the embedding and every projection), as the weights of a model not already 4-bit are.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy
import torch
from gguf_support import PROMPTS, edited, log_softmax, scaled_tensor
from transformers import AutoModelForCausalLM, AutoTokenizer

from pytest_genguard import calibrate, record
from pytest_genguard.core.budget import PRESETS, calibration_key, traces_report
from pytest_genguard.engines import engine
from pytest_genguard.engines.llama_cpp import file_type, load
from pytest_genguard.hf.smollm2 import gguf_path, smollm2_folder

SHOWN = ("fp16", "bf16", "int8", "gguf-q8_0", "gguf-q6_k", "gguf-q4_k_m", "gguf-q4_1")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--off-grid", type=float, default=0.0, metavar="SIGMA")
    args = parser.parse_args()
    folder = smollm2_folder()
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    if args.off_grid:
        generator = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for weight in model.parameters():
                if weight.dim() == 2:
                    noise = torch.randn(weight.shape, generator=generator) * weight.std() * args.off_grid
                    weight.add_(noise)
        folder = Path(tempfile.mkdtemp()) / f"smollm2-off-grid-{args.off_grid}"
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        print(f"off the Q4_1 grid: every matrix + N(0, ({args.off_grid} x its std)^2), saved in {folder}")
    reference = record(model, tokenizer, PROMPTS, max_new_tokens=args.steps, top_k=5, do_sample=False)
    reference = calibrate(model, tokenizer, reference, precisions=("fp16", "bf16", "int8", "int4"))
    calibration = reference.calibration
    sequences = [list(p.prompt_ids) + [s.token_id for s in p.steps] for p in reference.prompts]
    with torch.no_grad():
        ref_logits = [model(torch.tensor([s])).logits[0].numpy() for s in sequences]
    steps = sum(len(p.steps) for p in reference.prompts)
    print(f"reference: {len(PROMPTS)} prompts, {steps} greedy steps")
    for precision in ("fp16", "bf16", "int8", "int4"):
        exact = ", ".join(f"{k} {calibration[calibration_key(precision, k)]:.3g}" for k in ("kld_mean", "kld_p99"))
        bound = ", ".join(
            f"{k} {calibration[calibration_key(precision, 'bound.' + k)]:.3g}" for k in ("kld_mean", "kld_p99")
        )
        top1 = calibration[calibration_key(precision, "top1_agreement")]
        print(f"calibration {precision}: exact {exact}, top-1 {100 * top1:.1f}%; trace bounds {bound}")
    work = Path(tempfile.mkdtemp())
    files: dict[str, tuple[Path, str]] = {}
    for outtype in ("f32", "bf16", "q8_0", "q6_k", "q5_k_m", "q4_k_m", "q4_1"):
        start = time.perf_counter()
        files[outtype.upper()] = (engine("llama_cpp", outtype=outtype).convert(folder) / "model.gguf", "f16")
        print(f"convert {outtype}: {time.perf_counter() - start:.1f} s (cached after the first run)")
    files["F32, f32 KV cache"] = (files["F32"][0], "f32")
    if not args.off_grid:
        files["Q4_1 (shipped)"] = (gguf_path(), "f16")
    for name in [n for n in ("Q8_0", "Q6_K", "Q4_K_M", "Q4_1", "Q4_1 (shipped)") if n in files]:
        source = files[name][0]
        tag = name.split()[0].lower() + ("-shipped" if "shipped" in name else "")
        bugs = {
            "rope freq_base 1e5 -> 1e4": ("llama.rope.freq_base", "10000"),
            "rms eps 1e-5 -> 1e-4": ("llama.attention.layer_norm_rms_epsilon", "1e-4"),
        }
        for bug, (key, value) in bugs.items():
            where = work / f"{tag}-{key}"
            where.mkdir()
            files[f"*bug:* {name}, {bug}"] = (edited(source, where, "gguf_set_metadata", key, value), "f16")
        for factor in (1.1, 1.25):
            out = work / f"{tag}-norm{factor}.gguf"
            bug = f"blk.10.ffn_norm x{factor}"
            files[f"*bug:* {name}, {bug}"] = (scaled_tensor(source, out, "blk.10.ffn_norm.weight", factor), "f16")
    print(
        "\n| GGUF | KV cache | KLD mean | p99 | max | same top-1 | trace KLD mean, p99 (top-5 bound) "
        "| steps compared | × int8 mean, p99 | × int4 mean, p99 | holds |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, (path, kv) in files.items():
        logits = load(path, kv)([s[:-1] for s in sequences])
        klds, same = [], []
        for p, ref, got in zip(reference.prompts, ref_logits, logits, strict=True):
            first = len(p.prompt_ids) - 1
            a = log_softmax(ref[first : first + len(p.steps)])
            b = log_softmax(got[first : first + len(p.steps)])
            klds += list((numpy.exp(a) * (a - b)).sum(axis=-1))
            same += list(a.argmax(-1) == b.argmax(-1))
        trace = engine("llama_cpp", kv_cache=kv).record(folder, reference=reference, converted=path)
        report = traces_report(reference, trace, None)
        metrics = report.metrics
        ratios = []
        for precision in ("int8", "int4"):
            mean = metrics["kld_mean"] / calibration[calibration_key(precision, "bound.kld_mean")]
            p99 = metrics["kld_p99"] / calibration[calibration_key(precision, "bound.kld_p99")]
            ratios.append(f"{mean:.3g}, {p99:.3g}")
        held = [p for p in SHOWN if p in PRESETS and traces_report(reference, trace, PRESETS[p]).holds]
        k = numpy.asarray(klds)
        print(
            f"| {name} ({file_type(path)}) | {kv} | {k.mean():.2g} | {numpy.quantile(k, 0.99):.2g} | {k.max():.2g} | "
            f"{100 * numpy.mean(same):.1f}% | {metrics['kld_mean']:.2g}, {metrics['kld_p99']:.2g} | "
            f"{int(metrics['steps'])}/{int(metrics['steps']) + report.skipped} | "
            f"{' | '.join(ratios)} | {', '.join(held) or 'none'} |"
        )


if __name__ == "__main__":
    main()
