"""The noise of every environment axis as a share of the comparison rule's allowance, per architecture: the figures
of docs/portability.md. The worst |diff| / allowance over every compared value, over fine-tuned (pinned)
and untrained models, greedy and sampled (batch composition: greedy only).

    python -m benchmarks.noise_axes

Recorded axes come from `fixtures/cross_kernel` (an Intel Xeon with AVX-512 and torch 2.13.0/2.14.1, logprobs
computed in float32 by pytest-genguard 0.1; an AMD EPYC, logprobs in float64); live axes are decoded here.
"""

from __future__ import annotations

import dataclasses
import itertools
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))
sys.path.insert(0, str(ROOT / "tests" / "hf"))

import torch  # noqa: E402
from cross_kernel import ARCHS, BUNDLES, PROMPTS, bundle, worst_share  # noqa: E402
from test_noise_axes import decode, model_of, threads  # noqa: E402

from pytest_genguard.core.tolerances import FLOAT32  # noqa: E402


def recorded_pairs() -> dict[tuple[str, str], float]:
    """(pair kind, arch) -> worst share, over the recorded environments."""
    out: dict[tuple[str, str], float] = defaultdict(float)
    for a, b in itertools.combinations(BUNDLES, 2):
        if a.startswith("intel") and b.startswith("intel"):
            same_torch = ("2.14.1" in a) == ("2.14.1" in b)
            kind = (
                "Intel kernel sets (float32 logprobs)"
                if same_torch
                else "torch 2.13.0 vs 2.14.1 (Intel, any kernel sets)"
            )
        elif a.startswith("amd") and b.startswith("amd"):
            kind = "AMD scalar vs AVX2 (float64 logprobs)"
        else:
            kind = "AMD (float64) vs Intel (float32 logprobs)"
        for name, trace in bundle(a).items():
            arch = name.split("-")[0]
            out[kind, arch] = max(out[kind, arch], worst_share(trace, bundle(b)[name], FLOAT32))
    return out


def live_axes() -> dict[tuple[str, str], float]:
    out: dict[tuple[str, str], float] = defaultdict(float)
    for arch, kind, mode in itertools.product(ARCHS, ("ft0", "rand0"), ("greedy", "sampled")):
        model = model_of(arch, kind)
        with threads(1):
            one = decode(model, mode)
        with threads(2):
            two = decode(model, mode)
        out["1 vs 2 threads", arch] = max(out["1 vs 2 threads", arch], worst_share(one, two, FLOAT32))
        with threads(1):
            model.set_attn_implementation("eager")
            eager = decode(model, mode)
            model.set_attn_implementation("sdpa")
            sdpa = decode(model, mode)
            out["eager vs sdpa", arch] = max(out["eager vs sdpa", arch], worst_share(eager, sdpa, FLOAT32))
            if mode == "greedy":
                for i, prompt in enumerate(PROMPTS):
                    alone = decode(model, mode, [prompt])
                    batched = dataclasses.replace(one, prompts=(one.prompts[i],))
                    share = worst_share(batched, alone, FLOAT32)
                    out["alone vs batched", arch] = max(out["alone vs batched", arch], share)
            for name in BUNDLES:
                share = worst_share(bundle(name)[f"{arch}-{kind}-{mode}"], sdpa, FLOAT32)
                out["this run vs each recorded environment", arch] = max(
                    out["this run vs each recorded environment", arch], share
                )
    return out


def main() -> None:
    torch.set_num_threads(1)
    figures = {**recorded_pairs(), **live_axes()}
    kinds = list(dict.fromkeys(k for k, _ in figures))
    print("| axis | gpt2 | llama | t5 |")
    print("|---|---|---|---|")
    for kind in kinds:
        print(f"| {kind} | " + " | ".join(f"{figures[kind, a]:.0%}" for a in ARCHS) + " |")


if __name__ == "__main__":
    main()
