"""How far the examples' pinned weights decode apart across torch releases (docs/portability.md: "Supported torch").

    python benchmarks/cross_torch.py REFERENCE_PYTHON OTHER_PYTHON...

Each interpreter (a virtualenv with another torch, the package installed) records the examples' two decoding
snapshots (`examples/test_decoding.py`: greedy, and sampled with seed 0) from the pin in `examples/__genguard_pins__`,
in a subprocess with one torch thread; every other interpreter's traces are then compared with the first one's under
genguard's own rule (`compare()`, fp32 defaults). The table gives the largest |logprob difference| over every
compared value (chosen token and top-k) and whether the token paths are the same. A second table says whether the
random draws training and sampling take from one seed are the same as the reference's: dropout masks (`bernoulli_`),
`torch.multinomial` samples and `randn` (torch 2.6 draws other masks and samples than 2.7 and later). Not part of
`python -m benchmarks`: it needs one virtualenv per torch release.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PINS = ROOT / "examples" / "__genguard_pins__"
PROMPTS = ["the quick", "once upon a", "the train", "she reads"]  # examples/test_decoding.py

RECORD = """
import json, sys, tempfile
import torch
torch.set_num_threads(1)
from transformers import GenerationConfig
import pytest_genguard as gg
prompts, pins = json.loads(sys.argv[1]), sys.argv[2]
with tempfile.TemporaryDirectory() as cache:
    tuned = gg.finetune("gpt2", pin_dir=pins, pin="use", cache_dir=cache)
    greedy = gg.record(tuned.model, tuned.tokenizer, prompts, max_new_tokens=24, top_k=5)
    sampling = GenerationConfig(do_sample=True, temperature=1.5, top_k=50)
    sampled = gg.record(tuned.model, tuned.tokenizer, prompts, max_new_tokens=24, top_k=5, seed=0,
                        generation_config=sampling)
draws = {}
for name, draw in {
    "dropout (bernoulli_)": lambda: torch.nn.functional.dropout(torch.ones(4096), 0.1, training=True),
    "multinomial": lambda: torch.multinomial(torch.softmax(torch.randn(768), 0), 256, replacement=True),
    "randn": lambda: torch.randn(4096),
}.items():
    torch.manual_seed(0)
    draws[name] = draw().tolist()
traces = {"greedy": greedy.to_json(), "sampled": sampled.to_json()}
print(json.dumps({"torch": torch.__version__, **traces, "draws": draws}))
"""


def record(python: str) -> dict[str, Any]:
    """The greedy and sampled traces one interpreter records (its torch version under "torch")."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [python, "-c", RECORD, json.dumps(PROMPTS), str(PINS)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"cross_torch: {python} could not record the examples' traces:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def main(pythons: list[str]) -> int:
    from pytest_genguard import GenerationTrace, compare

    if len(pythons) < 2:
        print(__doc__)
        return 2
    runs = [record(p) for p in pythons]
    reference = runs[0]
    print(f"reference: torch {reference['torch']} ({pythons[0]})")
    print("| torch | trace | same tokens | verdict | max abs logprob diff | where |")
    print("|---|---|---|---|---|---|")
    for run in runs[1:]:
        for kind in ("greedy", "sampled"):
            expected = GenerationTrace.from_json(reference[kind])
            actual = GenerationTrace.from_json(run[kind])
            cmp = compare(expected, actual)
            same = all(
                [s.token_id for s in a.steps] == [s.token_id for s in b.steps]
                for a, b in zip(expected.prompts, actual.prompts, strict=True)
            )
            print(
                f"| {run['torch']} | {kind} | {'yes' if same else 'no'} | {cmp.verdict.value} "
                f"| {cmp.stats.max_abs:.3g} | {cmp.stats.worst or '-'} |"
            )
    print()
    print("| torch | " + " | ".join(reference["draws"]) + " |")
    print("|---|" + "---|" * len(reference["draws"]))
    for run in runs[1:]:
        same = ["same" if run["draws"][name] == values else "other" for name, values in reference["draws"].items()]
        print(f"| {run['torch']} | " + " | ".join(same) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
