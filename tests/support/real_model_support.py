"""SmolLM2-135M-Instruct for the tests, examples and benchmarks that derive or check a rule on a real model: its
prompts (4 conversations, 2 texts, as in fixtures/real_model/), the copies and bugs the rules were measured with, and
a worker that records one trace in a subprocess under a chosen CPU kernel set (``ATEN_CPU_CAPABILITY`` is read by
torch at start-up, so another kernel set means another process).

    python tests/support/real_model_support.py OUT.json --dtype bfloat16 [--bug rope] [--threads 2] [--beams 3]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def installed_or_skip(load: Callable[[], Path]) -> Path:
    """What a real model's loader gives (`smollm2_folder`, `gemma3_folder`, `gemma3_gguf`), or the test skipped with
    the loader's message, which names the install command, when its package is missing."""
    import pytest

    from pytest_genguard.core.errors import ModelUnavailable

    try:
        return load()
    except ModelUnavailable as exc:
        pytest.skip(str(exc))


CONVERSATIONS: list[Any] = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [
        {"role": "system", "content": "You are a concise assistant."},
        {"role": "user", "content": "Write a haiku about the sea."},
    ],
    [{"role": "user", "content": "Explain gradient descent in two sentences."}],
    [{"role": "user", "content": "List three prime numbers and say why they are prime."}],
]
TEXTS = ["def fibonacci(n):", "The history of the Roman Empire"]
PROMPTS: list[Any] = [*CONVERSATIONS, *TEXTS]
MAX_NEW_TOKENS = 48
TOP_K = 5

BUGS = {
    "rope": "rope base 1e5 -> 1e4 (config.rope_parameters)",
    "eps": "RMS norm epsilon 1e-5 -> 1e-2",
    "eps4": "RMS norm epsilon 1e-5 -> 1e-4 (below the bf16 floor)",
    "norm": "one post-attention norm (layer 10) scaled by 1.05",
}
"""Deliberate bugs of the real model (issue 38's table): a clear one (rope), a gross one (eps), a mild one (norm),
and one below the bf16 floor (eps4)."""


def load(dtype: str = "float32", bug: str | None = None) -> tuple[Any, Any]:
    """The real model in `dtype`, with `bug` (a key of `BUGS`) applied, and its tokenizer."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from pytest_genguard.hf.smollm2 import smollm2_folder

    folder = str(smollm2_folder())
    config = AutoConfig.from_pretrained(folder)
    if bug == "rope":
        params = dict(getattr(config, "rope_parameters", None) or {})
        if params:
            params["rope_theta"] = params.get("rope_theta", 1e5) / 10
            config.rope_parameters = params
        else:  # transformers 4.x
            config.rope_theta = config.rope_theta / 10
    elif bug == "eps":
        config.rms_norm_eps = 1e-2
    elif bug == "eps4":
        config.rms_norm_eps = 1e-4
    model = AutoModelForCausalLM.from_pretrained(folder, config=config, dtype=getattr(torch, dtype))
    if bug == "norm":
        with torch.no_grad():
            model.model.layers[10].post_attention_layernorm.weight.mul_(1.05)
    model.eval()
    return model, AutoTokenizer.from_pretrained(folder)


def record_trace(dtype: str, bug: str | None, beams: int | None) -> Any:
    import pytest_genguard

    model, tokenizer = load(dtype, bug)
    kwargs: dict[str, Any] = {"num_beams": beams} if beams else {}
    return pytest_genguard.record(model, tokenizer, PROMPTS, max_new_tokens=MAX_NEW_TOKENS, top_k=TOP_K, **kwargs)


def record_in_subprocess(
    out: Path,
    *,
    kernels: str | None = None,
    dtype: str = "float32",
    bug: str | None = None,
    threads: int = 1,
    beams: int | None = None,
) -> Path:
    """Record the real model's trace in a fresh process under `kernels` (None: this process's default)."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    env.pop("ATEN_CPU_CAPABILITY", None)
    if kernels is not None:
        env["ATEN_CPU_CAPABILITY"] = kernels
    args = [sys.executable, __file__, str(out), "--dtype", dtype, "--threads", str(threads)]
    args += ["--bug", bug] if bug else []
    args += ["--beams", str(beams)] if beams else []
    subprocess.run(args, env=env, check=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--bug", choices=sorted(BUGS))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--beams", type=int)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    trace = record_trace(args.dtype, args.bug, args.beams)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(trace.to_json(), encoding="utf-8")
    tmp.replace(args.out)


if __name__ == "__main__":
    main()
