"""`record()` vs a bare `generate(..., return_dict_in_generate=True, output_logits=True)` of the same batch.

Both sides tokenize the batch (left padded); the record side also asks `generate()` for the processed scores and does
its post-processing (top-k, tolist, token texts, model/tokenizer fingerprints, environment). Two models, both judged:

- the default tiny GPT-2, the four shipped probe prompts, 24 new tokens;
- a 12-layer, 768-wide GPT-2 built from a config (86M parameters), two probe prompts, 8 new tokens: what record()
  adds must not grow with the model. Its weights fingerprint (sha256 of every weight) costs about a decoding step of
  such a model, so it is computed once per model state and reused (`pytest_genguard.hf.weights_watch`); a third row
  times one fingerprint against hashing every weight and counts the full hashes during the timed record() calls.

The breakdown times record()'s own parts alone so that a miss names its cause.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchmarks.harness import Result, alternate, ms, profile, repeat

TARGET = 1.10
BIG: dict[str, Any] = {"n_layer": 12, "n_embd": 768, "n_head": 12, "n_inner": 3072}
"""A GPT-2 of GPT-2 small's shape (with the tiny tokenizer's vocabulary): 86M parameters."""


class HashCounter:
    """Counts the fingerprint hashes that read every weight (`weights_hash.state_dict_sha256`) while installed."""

    def __init__(self) -> None:
        from pytest_genguard.hf import weights_hash

        self.module = weights_hash
        self.real: Callable[..., str] = weights_hash.state_dict_sha256
        self.calls = 0

    def __enter__(self) -> HashCounter:
        def counting(state: Any) -> str:
            self.calls += 1
            return self.real(state)

        self.module.state_dict_sha256 = counting
        return self

    def __exit__(self, *exc: object) -> None:
        self.module.state_dict_sha256 = self.real


def _measure(
    model: Any, tokenizer: Any, prompts: list[str], new_tokens: int, label: str, pairs: int, smoke: bool
) -> tuple[Result, int]:
    import torch

    from pytest_genguard.hf.environment import environment
    from pytest_genguard.hf.fingerprint import model_fingerprint
    from pytest_genguard.hf.record import record
    from pytest_genguard.hf.tokenizer_hash import tokenizer_fingerprint

    def recorded() -> Any:
        return record(model, tokenizer, prompts, max_new_tokens=new_tokens, top_k=5)

    def bare(**extra: Any) -> Any:
        tokenizer.padding_side = "left"
        batch = tokenizer(prompts, return_tensors="pt", padding=True)
        return model.generate(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            max_new_tokens=new_tokens,
            return_dict_in_generate=True,
            output_logits=True,
            **extra,
        )

    first = recorded().prompts[0]
    out = bare()
    start = out.sequences.shape[1] - len(out.logits)
    same = first.token_ids == tuple(out.sequences[0, start : start + len(first.steps)].tolist())
    with HashCounter() as hashes:
        paired = alternate(recorded, bare, pairs)
    ratios = paired.ratios
    scores = alternate(lambda: bare(output_scores=True), bare, pairs).ratios
    n = 2 if smoke else 15
    parts = {
        "model_fingerprint() (weights hash remembered)": repeat(lambda: model_fingerprint(model), n),
        "tokenizer_fingerprint()": repeat(lambda: tokenizer_fingerprint(tokenizer), n),
        "environment()": repeat(lambda: environment(model, torch.device("cpu")), n),
    }
    extra = paired.a.median - paired.b.median
    params = sum(p.numel() for p in model.parameters())
    fixed = sum(s.median for s in parts.values())
    details = [
        f"- record() seconds min/median/max: {paired.a.text('{:.4f}')}",
        f"- bare generate() seconds min/median/max: {paired.b.text('{:.4f}')}",
        f"- record() costs {ms(extra)} more (median); the parts, timed alone (medians):",
        f"  - generate() with output_scores=True as well (record needs the processed scores): "
        f"{scores.median:.3f}× the bare call",
        *(f"  - {name}: {ms(s.median)}" for name, s in parts.items()),
        f"- what record() adds is a fixed cost per call, not per token: the fingerprints and environment above "
        f"({ms(fixed)}), then building the Steps and token texts; against a generate() of {ms(paired.b.median)} "
        f"that is {extra / paired.b.median * 100:.1f}%",
        f"- full weight hashes during its {pairs + 1} record() calls (one an untimed warm-up): {hashes.calls}",
    ]
    met = ratios.median <= TARGET
    if not met:
        calls = 2 if smoke else 20
        details += ["", f"Profile of {calls} record() calls:", "", *profile(recorded, calls=calls)]
    notes = [
        f"record {ms(paired.a.median)} vs bare generate {ms(paired.b.median)} ({pairs} alternating pairs, "
        f"{len(prompts)} prompts, {new_tokens} tokens, {params / 1e6:.2f}M parameters)",
        f"same greedy path on both sides: {same}",
    ]
    result = Result(
        key="record",
        figure=f"record() vs bare generate(output_logits=True), {label}",
        target=f"≤ {TARGET:.2f}×",
        spread=ratios,
        unit="×",
        headline=f"{ratios.median:.2f}×",
        met=met,
        notes=notes,
        details=details,
    )
    return result, hashes.calls


def _fingerprint_row(model: Any, label: str, full_hashes: int, calls: int, smoke: bool) -> Result:
    """One model_fingerprint() call of an unchanged model against hashing every weight."""
    from pytest_genguard.hf.fingerprint import model_fingerprint
    from pytest_genguard.hf.weights_hash import state_dict_sha256

    n = 2 if smoke else 7
    remembered = repeat(lambda: model_fingerprint(model), 3 * n)
    full = repeat(lambda: state_dict_sha256(model.state_dict()), n)
    params = sum(p.numel() for p in model.parameters())
    return Result(
        key="record",
        figure=f"weights fingerprint per record() call, {label}",
        target="not per call",
        spread=remembered.scaled(1000),
        unit=" ms",
        headline=f"{ms(remembered.median)} per call ({full_hashes} full hashes in {calls} record() calls)",
        met=full_hashes == 0,
        notes=[
            f"hashing every weight ({params / 1e6:.0f}M parameters) {ms(full.median)}, once per model state; a call "
            f"on an unchanged model {ms(remembered.median)} (model_fingerprint(), medians)",
            "a call checks, without reading the weights, that nothing changed: state-dict names, storages, version "
            "counters, optimizer steps and a bitwise sample of every row (see pytest_genguard/hf/weights_watch.py)",
        ],
        details=[
            f"- model_fingerprint() of the unchanged model, ms min/median/max: {remembered.scaled(1000).text()}",
            f"- sha256 of every weight, ms min/median/max: {full.scaled(1000).text()}",
        ],
    )


def run(smoke: bool) -> list[Result]:
    from pytest_genguard.hf.tiny import probe_prompts, tiny_model, tiny_tokenizer

    tokenizer = tiny_tokenizer()
    prompts = probe_prompts()
    tiny, _ = _measure(tiny_model("gpt2"), tokenizer, prompts, 24, "tiny gpt2", 2 if smoke else 40, smoke)
    big_model = tiny_model("gpt2", **({} if smoke else BIG))
    label = "tiny gpt2 (smoke)" if smoke else "86M-param GPT-2 (12 layers, 768 wide)"
    pairs = 2 if smoke else 16
    big, full_hashes = _measure(big_model, tokenizer, prompts[:2], 8, label, pairs, smoke)
    return [tiny, big, _fingerprint_row(big_model, label, full_hashes, pairs + 1, smoke)]
