"""docs/servers.md's sampler table: transformers' sampled snapshots judged against real servers' samplers, step by
step (`pytest_genguard.serving.sampler`), with the servers' default semantics and aligned.

Not part of `python -m benchmarks` (it needs the llama_cpp extra, the llama-server build, and for vLLM a running
server in ``--logprobs-mode processed_logprobs``):
    OMP_NUM_THREADS=1 python benchmarks/sampler_table.py [--steps 4] [--vllm URL]
llama-server serves SmolLM2-135M-Instruct's F32 file (llama.cpp's converter) twice: an f32 KV cache with flash
attention off (the float32 rule's server) and llama-server's defaults (an f16 cache, flash attention on); the prompt is
"The Pacific Ocean is". vLLM (``--vllm``) serves the pinned tiny llama of tests/serving (fixtures/vllm_tiny_llama),
its two first prompts. Prints one Markdown row per snapshot, server and request: the first step's kept counts
(recorded, its near-threshold range, served), the largest |difference| of a probability over every step, the worst
share of its bound, the verdict and the cause named.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

import llama_server
import served_model

from pytest_genguard import record
from pytest_genguard.core.tolerances import FLOAT16
from pytest_genguard.engines import engine
from pytest_genguard.hf.smollm2 import smollm2_folder
from pytest_genguard.serving.http import Endpoint
from pytest_genguard.serving.sampler import judge_sampler
from pytest_genguard.serving.servers import connect

SETTINGS: list[dict[str, float]] = [
    {"temperature": 0.7, "top_p": 0.9},
    {"temperature": 1.5, "top_p": 0.9},
    {"temperature": 0.7, "min_p": 0.1},
    {"temperature": 1.5, "min_p": 0.1},
    {"temperature": 1.5, "min_p": 0.1, "top_p": 0.8},
    {"temperature": 1.5, "top_k": 40},
]


def snapshots(model: Any, tokenizer: Any, prompts: list[str], steps: int) -> list[tuple[str, Any]]:
    out = []
    for settings in SETTINGS:
        config = GenerationConfig(do_sample=True, **{"top_k": 0, **settings})
        trace = record(model, tokenizer, prompts, max_new_tokens=steps, seed=0, generation_config=config)
        out.append((", ".join(f"{k} {v:g}" for k, v in settings.items()), trace))
    return out


def rows(url: str, label: str, traces: list[tuple[str, Any]], aligns: tuple[bool, ...], tolerances: Any = None) -> None:
    server = connect(Endpoint(url, timeout=600))
    for name, trace in traces:
        for align in aligns:
            report = judge_sampler(server, trace, align=align, tolerances=tolerances)
            assert report is not None
            if report.not_judged is not None:
                print(
                    f"| {name} | {label} | {'aligned' if align else 'default'} | | | | unproven: {report.not_judged} |"
                )
                continue
            first = report.steps[0]
            band = "" if first.low == first.high else f" ({first.low}-{first.high})"
            served = f">= {first.asked}" if first.served_kept is None else str(first.served_kept)
            worst = max(s.share for s in report.steps)
            causes = "; ".join(c.name + (" (shown)" if c.proven else " (settings)") for c in report.causes)
            print(
                f"| {name} | {label} | {'aligned' if align else 'default'} | {first.kept}{band} / {served} | "
                f"{report.max_abs:.2g} | {worst:.3g} | {report.status} | {causes} |"
            )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--vllm", default=None, metavar="URL", help="a vLLM server of the tiny llama, processed mode")
    args = parser.parse_args()
    head = "| settings | server | request | kept at step 0: recorded (range) / served | max abs Δp | worst share |"
    print(head + " verdict | cause |")
    print("|---|---|---|---|---|---|---|---|")
    folder = smollm2_folder()
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    traces = snapshots(model, tokenizer, ["The Pacific Ocean is"], args.steps)
    f32 = engine("llama_cpp", outtype="f32").convert(folder) / "model.gguf"
    defaults = "llama-server defaults (f16 KV, flash on)"
    servers = {
        "llama-server f32 KV, flash off": (f32, "f32", ("--flash-attn", "off")),
        defaults: (f32, "f16", ("--flash-attn", "auto")),
    }
    with tempfile.TemporaryDirectory() as work, llama_server.side_by_side(Path(work), servers) as urls:
        for label, url in urls.items():
            rows(url, label, traces, (False, True))
        # llama-server's defaults round its logits like an f16 cast: judged as check-server --budget fp16 does
        rows(urls[defaults], defaults + ", at float16's rule (--budget fp16)", traces, (True,), FLOAT16)
    if args.vllm:
        tiny = AutoModelForCausalLM.from_pretrained(served_model.MODEL_DIR).eval()
        tiny_tokenizer = AutoTokenizer.from_pretrained(served_model.MODEL_DIR)
        rows(
            args.vllm,
            "vLLM 0.32 float32 (tiny llama)",
            snapshots(tiny, tiny_tokenizer, list(served_model.PROMPTS[:2]), args.steps),
            (False,),
        )


if __name__ == "__main__":
    main()
