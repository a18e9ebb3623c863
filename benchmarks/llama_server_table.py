"""docs/servers.md's llama-server table: SmolLM2-135M-Instruct's GGUF files served by a real llama-server (the one
``.ci/llama-cpp-wheel`` builds) on loopback, judged regenerated against transformers' float32 greedy snapshot.

Not part of `python -m benchmarks` (it needs the llama_cpp extra, the llama-server build and about 2 minutes):
    OMP_NUM_THREADS=1 python benchmarks/llama_server_table.py [--steps 64]
Prints a Markdown table per server configuration: the comparison rule's verdict and how much of its allowance the
worst value used, the largest shift of a chosen token's logprob (the normalizer's share, `NORMALIZER_FIELD`), the
largest change of a top-k gap to it, and the int8 budget's status (lower bounds over the top-20).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

import llama_server
from gguf_support import PROMPTS

from pytest_genguard import calibrate, record
from pytest_genguard.core.budget import PRESETS, traces_report
from pytest_genguard.core.compare import compare
from pytest_genguard.core.trace import GenerationTrace
from pytest_genguard.engines import engine
from pytest_genguard.hf.smollm2 import smollm2_folder
from pytest_genguard.serving import Endpoint, record_server
from pytest_genguard.serving.record import at_top_k


def shifts(reference: GenerationTrace, served: GenerationTrace) -> tuple[float, float, int]:
    """The largest |shift| of a chosen token's logprob, the largest change of a gap to it, on the common path; and
    the steps compared."""
    shift = gap = 0.0
    steps = 0
    for e, a in zip(reference.prompts, served.prompts, strict=True):
        for es, as_ in zip(e.steps, a.steps, strict=False):
            if es.token_id != as_.token_id:
                break
            steps += 1
            shift = max(shift, abs(as_.logprob - es.logprob))
            theirs = dict(zip(as_.top_ids, as_.top_logprobs, strict=True))
            for tid, lp in zip(es.top_ids, es.top_logprobs, strict=True):
                if tid in theirs:
                    gap = max(gap, abs((theirs[tid] - as_.logprob) - (lp - es.logprob)))
    return shift, gap, steps


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=64)
    args = parser.parse_args()
    folder = smollm2_folder()
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    reference = record(model, tokenizer, PROMPTS, max_new_tokens=args.steps, top_k=5, do_sample=False)
    reference = calibrate(model, tokenizer, reference, precisions=("int8",))
    f32 = engine("llama_cpp", outtype="f32").convert(folder) / "model.gguf"
    q8 = engine("llama_cpp", outtype="q8_0").convert(folder) / "model.gguf"
    configurations = [
        ("F32", f32, "f32", "off"),
        ("F32", f32, "f32", "auto"),
        ("F32", f32, "f16", "off"),
        ("F32", f32, "f16", "auto"),
        ("Q8_0", q8, "f16", "auto"),
    ]
    print("| GGUF | KV cache | flash attention | float32 rule | worst share | max shift | max gap change | int8 |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as work:
        for name, gguf, kv, flash in configurations:
            server = llama_server.wait(
                llama_server.launch(gguf, Path(work), kv_cache=kv, extra=("--flash-attn", flash), name=name)
            )
            try:
                start = time.perf_counter()
                run = record_server(Endpoint(server.url), reference, logprobs=20)
                seconds = time.perf_counter() - start
            finally:
                server.stop()
            judged = at_top_k(run.trace, 5)
            comparison = compare(reference, judged)
            shift, gap, steps = shifts(reference, judged)
            report = traces_report(reference, run.trace, PRESETS["int8"])
            print(
                f"| {name} | {kv} | {flash} | {comparison.verdict.value} | {comparison.stats.max_share:.2f} | "
                f"{shift:.2g} | {gap:.2g} | {report.status} (KLD mean {report.metrics['kld_mean']:.2g}) |"
                f" <!-- {steps} steps, {seconds:.1f} s -->"
            )


if __name__ == "__main__":
    main()
