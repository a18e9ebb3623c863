"""What judging a server costs: seconds per prompt teacher forced through it (one request scores the whole path)
against the server generating the same tokens (its own greedy decoding of as many tokens, with the same top-k).

Needs a running vLLM server serving the model of the snapshot, so it is not one of `python -m benchmarks`' figures:

    python -m benchmarks.server_cost URL SNAPSHOT.genguard [--pairs 10]

The two sides are timed in alternation (`harness.alternate`) and the per-pair ratio reported, as every figure here.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable from the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import alternate, loadavg, machine, secs
from pytest_genguard.core.trace import GenerationTrace
from pytest_genguard.serving.http import Endpoint
from pytest_genguard.serving.record import record_server, top_k_of
from pytest_genguard.serving.servers import connect
from pytest_genguard.serving.vllm import VLLM


def measure(url: str, snapshot: GenerationTrace, pairs: int) -> list[str]:
    """Markdown lines: the per-prompt seconds of both sides and their ratio."""
    endpoint = Endpoint(url)
    server = connect(endpoint, VLLM.name)
    info = server.info
    k = top_k_of(snapshot)
    prompts = len(snapshot.prompts)

    def forced() -> None:
        record_server(endpoint, snapshot, server=server)

    def generated() -> None:
        for p in snapshot.prompts:
            VLLM.generate(endpoint, info, p.prompt_ids, max(len(p.steps), 1), k)

    paired = alternate(forced, generated, pairs)
    per_prompt = paired.a.scaled(1 / prompts), paired.b.scaled(1 / prompts)
    return [
        f"server cost ({info.label('teacher forced')}, {prompts} prompts, top-{k}, {pairs} alternating pairs):",
        f"- teacher forced: {per_prompt[0].text('{:.3g}', ' s')} per prompt (min / median / max; includes the "
        "tokenizer check)",
        f"- the server generating the same tokens: {per_prompt[1].text('{:.3g}', ' s')} per prompt",
        f"- ratio teacher forced / generating: {paired.ratios.text('{:.3g}', '×')}; median "
        f"{secs(per_prompt[0].median)} vs {secs(per_prompt[1].median)}",
        f"- load average {loadavg()}",
        *machine(),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.server_cost", description=__doc__)
    parser.add_argument("url")
    parser.add_argument("snapshot", type=Path)
    parser.add_argument("--pairs", type=int, default=10)
    args = parser.parse_args(argv)
    snapshot = GenerationTrace.from_json(args.snapshot.read_text(encoding="utf-8"), source=str(args.snapshot))
    print("\n".join(measure(args.url, snapshot, args.pairs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
