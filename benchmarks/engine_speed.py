"""Serving engines against transformers (`pytest_genguard.engines`): do they hold the float32 rule, and how fast are
they?

Tiny gpt2 and llama (`tiny_model`, saved with `save_pretrained`), 2 prompts × 24 tokens, top-5, greedy and sampled
(temperature 0.8, top-k 20, seed 3). Per engine:

- paths: prompts whose engine path (teacher forced, a greedy step where the engine prefers another token ends it) has
  the transformers tokens;
- worst drift as a share of the allowance: the smallest factor f for which `compare()` still passes with every term
  of the float32 allowance (atol, rtol, lse_ulps) scaled by f, found by bisection through the public `compare()` and
  `tolerances_for()`; under 1 means the float32 rule holds, with that much room;
- speed: the engine scoring every prompt's whole path in one call (what teacher forcing costs) against transformers
  `generate()` of the same tokens (`record()`), medians of alternating runs; and `Engine.record()` itself (loading the
  saved model for its fingerprint, the engine session, the trace) against `record()`.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from benchmarks.harness import Result, alternate, ms, ratio_row

PROMPTS = ["the quick", "once upon a time"]
ENGINES = ("ctranslate2", "onnxruntime")


def _references(arch: str, model: Any, tokenizer: Any) -> dict[str, Any]:
    from pytest_genguard.hf.record import record

    config = model.generation_config
    config.top_k = 20
    return {
        "greedy": record(model, tokenizer, PROMPTS, max_new_tokens=24, top_k=5),
        "sampled": record(
            model,
            tokenizer,
            PROMPTS,
            max_new_tokens=24,
            top_k=5,
            do_sample=True,
            temperature=0.8,
            seed=3,
            generation_config=config,
        ),
    }


def share_of_allowance(expected: Any, actual: Any) -> float:
    """The smallest factor of the float32 allowance (atol, rtol and lse_ulps scaled together) under which compare()
    passes."""
    from pytest_genguard.core.compare import compare
    from pytest_genguard.core.tolerances import tolerances_for

    base = tolerances_for("float32")

    def passes(f: float) -> bool:
        scaled = base.replace(atol=base.atol * f, rtol=base.rtol * f, lse_ulps=base.lse_ulps * f)
        return bool(compare(expected, actual, tolerances=scaled))

    if passes(0.0):
        return 0.0
    low, high = 0.0, 1.0
    while not passes(high):
        low, high = high, high * 4
        if high > 1e6:
            return float("inf")
    for _ in range(20):
        mid = (low + high) / 2
        low, high = (low, mid) if passes(mid) else (mid, high)
    return high


def _engine_rows(
    name: str, saved: dict[str, Path], models: dict[str, Any], tokenizer: Any, smoke: bool
) -> list[Result]:
    from pytest_genguard.engines import engine
    from pytest_genguard.hf.record import record

    with tempfile.TemporaryDirectory() as cache:
        served = engine(name, cache_dir=cache)
        same, total, shares = 0, 0, []
        for arch, folder in saved.items():
            for mode, expected in _references(arch, models[arch], tokenizer).items():
                actual = served.record(folder, reference=expected)
                same += sum(a.token_ids == e.token_ids for a, e in zip(actual, expected, strict=True))
                total += len(expected.prompts)
                shares.append((share_of_allowance(expected, actual), f"{arch} {mode}"))
        worst, where = max(shares)
        arch = "llama"
        expected = _references(arch, models[arch], tokenizer)["greedy"]
        logits = served.backend.load(served.convert(saved[arch]))
        sequences = [list(p.prompt_ids) + list(p.token_ids) for p in expected]
        pairs = 3 if smoke else 30

        def hf_generate() -> Any:
            return record(models[arch], tokenizer, PROMPTS, max_new_tokens=24, top_k=5)

        scoring = alternate(lambda: logits(sequences), hf_generate, pairs)
        checking = alternate(lambda: served.record(saved[arch], reference=expected), hf_generate, 2 if smoke else 10)
        version = served.backend.version
    return [
        Result(
            key="engines",
            figure=f"{name} {version} vs transformers: paths and worst drift (tiny gpt2+llama, greedy+sampled)",
            target="same paths, drift < 1× the float32 allowance",
            spread=None,
            unit="×",
            headline=f"paths {same}/{total} same; worst drift {worst:.2g}× the allowance ({where})",
            met=same == total and worst < 1.0,
            notes=["share of the allowance: the smallest factor of all its terms under which compare() still passes"],
        ),
        ratio_row(
            "engines",
            f"{name}: scoring 2 paths of 24 tokens vs transformers generate() of them, tiny llama",
            scoring,
            f"{1 / scoring.ratios.median:.1f}× faster",
            [f"{name} {ms(scoring.a.median)} vs record() {ms(scoring.b.median)} (medians of {pairs} pairs)"],
        ),
        ratio_row(
            "engines",
            f"{name}: Engine.record() (load, score, trace) vs record(), tiny llama",
            checking,
            f"{checking.ratios.median:.2f}×",
            [
                f"Engine.record {ms(checking.a.median)} vs record() {ms(checking.b.median)}: most of it loads the "
                "saved model (its fingerprint) and the engine session, once per call"
            ],
        ),
    ]


def run(smoke: bool) -> list[Result]:
    from pytest_genguard.engines import EngineUnavailable, engine
    from pytest_genguard.hf.tiny import tiny_model, tiny_tokenizer

    tokenizer = tiny_tokenizer()
    results: list[Result] = []
    with tempfile.TemporaryDirectory() as tmp:
        saved, models = {}, {}
        for arch in ("gpt2", "llama"):
            models[arch] = tiny_model(arch)
            saved[arch] = Path(tmp) / arch
            models[arch].save_pretrained(saved[arch])
            tokenizer.save_pretrained(saved[arch])
        for name in ENGINES:
            try:
                engine(name)
            except EngineUnavailable as exc:
                missing = Result("engines", f"{name} (not installed)", "report", None, "", "not run", None, [str(exc)])
                results.append(missing)
                continue
            results += _engine_rows(name, saved, models, tokenizer, smoke)
    return results
