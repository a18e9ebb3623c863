"""The detection floor: the smallest change of each kind that the comparison rule still catches, under the rule of
pytest-genguard 0.1 (no rounding term: ``lse_ulps=0``) and under today's, on the pinned fine-tuned tiny models of
`fixtures/cross_kernel/pins` (8 probe prompts, 24 greedy tokens, top-5). A change is caught when `compare()` of the
baseline and the changed model's traces is not ok.

    python -m benchmarks.detection_floor            # the table "What it catches" of docs/portability.md

The magnitudes form a grid of four steps per decade (1, 1.78, 3.16, 5.62 x 10^k); the floor is the smallest grid
value caught with every larger one caught too (checked up to 10x above).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))

import torch  # noqa: E402
from cross_kernel import PINS, PROMPTS  # noqa: E402
from perturb import KINDS, pinned  # noqa: E402

import pytest_genguard as gg  # noqa: E402

GRID = [10 ** (k / 4) for k in range(-40, 0)]  # 1e-10 .. 0.56


def decode(model: object, tokenizer: object) -> gg.GenerationTrace:
    return gg.record(model, tokenizer, PROMPTS, max_new_tokens=24, top_k=5)


def floor(arch: str, kind: str, old_rule: bool) -> float | None:
    """The smallest grid magnitude of `kind` caught on `arch` (bisection over the grid, then checked above)."""
    tokenizer = gg.tiny_tokenizer()
    model = pinned(arch, PINS)
    base = decode(model, tokenizer)
    cache: dict[int, bool] = {}

    def caught(i: int) -> bool:
        if i not in cache:
            with KINDS[kind](model, GRID[i]):
                changed = decode(model, tokenizer)
            cache[i] = not gg.compare(base, changed, lse_ulps=0 if old_rule else None)
        return cache[i]

    lo, hi = 0, len(GRID) - 1
    if not caught(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if caught(mid) else (mid + 1, hi)
    if not all(caught(i) for i in range(lo, min(lo + 4, len(GRID)))):
        raise RuntimeError(f"{arch} {kind}: detection is not monotone above {GRID[lo]:.3g}")
    return GRID[lo]


@dataclasses.dataclass
class Row:
    kind: str
    arch: str
    old: float | None
    new: float | None


def main() -> None:
    torch.set_num_threads(1)
    rows = [Row(k, a, floor(a, k, True), floor(a, k, False)) for k in KINDS for a in ("gpt2", "llama", "t5")]
    print("| change | arch | caught from (rule of 0.1) | caught from (today's rule) |")
    print("|---|---|---|---|")
    for r in rows:
        old = "not caught" if r.old is None else f"{r.old:.3g}"
        new = "not caught" if r.new is None else f"{r.new:.3g}"
        print(f"| {r.kind} | {r.arch} | {old} | {new} |")


if __name__ == "__main__":
    main()
