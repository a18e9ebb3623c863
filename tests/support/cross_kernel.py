"""The cross-kernel decoding data in `fixtures/cross_kernel/` (see its README): the same pinned and untrained tiny
models decoded under every CPU kernel set, on an Intel Xeon with AVX-512 (two torch releases) and on an AMD EPYC."""

from __future__ import annotations

import dataclasses
import gzip
import json
from functools import cache
from pathlib import Path

from pytest_genguard.core.rule import Rule, ValueKind
from pytest_genguard.core.tolerances import Tolerances
from pytest_genguard.core.trace import GenerationTrace

FOLDER = Path(__file__).resolve().parents[2] / "fixtures" / "cross_kernel"
PINS = FOLDER / "pins"
BEAM = FOLDER / "beam"
BEAM_KERNEL_SETS = ("avx2", "avx512")
BUNDLES = tuple(sorted(p.name.removesuffix(".json.gz") for p in FOLDER.glob("*.json.gz")))
ARCHS = ("gpt2", "llama", "t5")
PROMPTS = [
    "the quick brown",
    "once upon a time there",
    "hello",
    "tests keep models",
    "a small",
    "why is the sky",
    "she said that",
    "numbers like 3 and",
]


@cache
def bundle(name: str) -> dict[str, GenerationTrace]:
    """One environment's 36 traces by name ('llama-ft0-greedy', ...)."""
    texts = json.loads(gzip.decompress((FOLDER / f"{name}.json.gz").read_bytes()))
    return {key: GenerationTrace.from_json(text, source=f"{name}/{key}") for key, text in texts.items()}


@cache
def beam(arch: str, kernel_set: str) -> GenerationTrace:
    """A beam search trace (`beam/`: num_beams 3, top-5) of `arch` recorded under `kernel_set` on an AMD EPYC."""
    path = BEAM / f"{arch}-beam.{kernel_set}.json"
    return GenerationTrace.from_json(path.read_text(), source=str(path))


def without_lse(trace: GenerationTrace) -> GenerationTrace:
    """The trace as pytest-genguard 0.1 wrote it (no per-step log-sum-exp): compared with that version's rule."""
    prompts = tuple(
        dataclasses.replace(p, steps=tuple(dataclasses.replace(s, lse=None) for s in p.steps)) for p in trace.prompts
    )
    return dataclasses.replace(trace, prompts=prompts)


def worst_share(a: GenerationTrace, b: GenerationTrace, tolerances: Tolerances) -> float:
    """The largest |diff| / allowance over the values compare() checks on the common path (chosen logprob, score,
    top-k entries present on both sides): how much of the allowance the noise used."""
    worst = 0.0
    rule = Rule.between(a, b, tolerances)
    for pa, pb in zip(a.prompts, b.prompts, strict=True):
        for sa, sb in zip(pa.steps, pb.steps, strict=False):
            if sa.token_id != sb.token_id:
                break
            step = rule.at(sa, sb)
            theirs = dict(zip(sb.top_ids, sb.top_logprobs, strict=True))
            pairs: list[tuple[float, float, ValueKind]] = [(sa.logprob, sb.logprob, "logprob")]
            pairs.append((sa.score, sb.score, "score"))
            pairs += [(x, theirs[i], "top") for i, x in zip(sa.top_ids, sa.top_logprobs, strict=True) if i in theirs]
            for x, y, kind in pairs:
                if x != y:
                    worst = max(worst, abs(x - y) / step.allowance(x, y, kind))
    return worst
