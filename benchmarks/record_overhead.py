"""`record()` vs a bare `generate(..., return_dict_in_generate=True, output_logits=True)` of the same batch.

Same model, the four shipped probe prompts as one left-padded batch, 24 new tokens. Both sides tokenize the batch;
the record side also asks `generate()` for the processed scores and does its post-processing (top-k, tolist, token
texts, model/tokenizer fingerprints, environment). The breakdown times those parts on their own so a miss names its
cause. The target applies to the default tiny GPT-2; a second, report-only row uses a 26M-parameter llama to show how
the weights fingerprint (sha256 over every weight, on every call) grows with the model while generation does not.
"""

from __future__ import annotations

from typing import Any

from benchmarks.harness import Result, alternate, ms, profile, repeat

MAX_NEW_TOKENS = 24
TARGET = 1.10
BIG: dict[str, Any] = {
    "hidden_size": 512,
    "intermediate_size": 1376,
    "num_hidden_layers": 8,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
}


def _measure(model: Any, tokenizer: Any, label: str, pairs: int, judged: bool, smoke: bool) -> Result:
    import torch

    from pytest_genguard.environment import environment
    from pytest_genguard.fingerprint import model_fingerprint, tokenizer_fingerprint
    from pytest_genguard.record import record
    from pytest_genguard.tiny import probe_prompts

    prompts = probe_prompts()

    def recorded() -> Any:
        return record(model, tokenizer, prompts, max_new_tokens=MAX_NEW_TOKENS, top_k=5)

    def bare(**extra: Any) -> Any:
        tokenizer.padding_side = "left"
        batch = tokenizer(prompts, return_tensors="pt", padding=True)
        return model.generate(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            max_new_tokens=MAX_NEW_TOKENS,
            return_dict_in_generate=True,
            output_logits=True,
            **extra,
        )

    first = recorded().prompts[0]
    out = bare()
    start = out.sequences.shape[1] - len(out.logits)
    same = first.token_ids == tuple(out.sequences[0, start : start + len(first.steps)].tolist())
    paired = alternate(recorded, bare, pairs)
    ratios = paired.ratios
    scores = alternate(lambda: bare(output_scores=True), bare, pairs).ratios
    n = 2 if smoke else 15
    parts = {
        "model_fingerprint() (sha256 of all weights)": repeat(lambda: model_fingerprint(model), n),
        "tokenizer_fingerprint()": repeat(lambda: tokenizer_fingerprint(tokenizer), n),
        "environment()": repeat(lambda: environment(model, torch.device("cpu")), n),
    }
    extra = paired.a.median - paired.b.median
    params = sum(p.numel() for p in model.parameters())
    details = [
        f"- record() seconds min/median/max: {paired.a.text('{:.4f}')}",
        f"- bare generate() seconds min/median/max: {paired.b.text('{:.4f}')}",
        f"- record() costs {ms(extra)} more (median); the parts, timed alone (medians):",
        f"  - generate() with output_scores=True as well (record needs the processed scores): "
        f"{scores.median:.3f}× the bare call",
        *(f"  - {name}: {ms(s.median)}" for name, s in parts.items()),
    ]
    met = ratios.median <= TARGET if judged else None
    fixed = sum(s.median for s in parts.values())
    weights = parts["model_fingerprint() (sha256 of all weights)"].median
    details.append(
        f"- what record() adds is a fixed cost per call, not per token: the fingerprints and environment above "
        f"({ms(fixed)}), then building the Steps and token texts; against a generate() of {ms(paired.b.median)} "
        f"that is {extra / paired.b.median * 100:.0f}%. The weights fingerprint hashes every weight on every call "
        f"({ms(weights)} for {params / 1e6:.2f}M parameters here), so it grows with the model (see the 26M row)"
    )
    if met is False:
        calls = 2 if smoke else 20
        details += ["", f"Profile of {calls} record() calls:", "", *profile(recorded, calls=calls)]
    notes = [
        f"record {ms(paired.a.median)} vs bare generate {ms(paired.b.median)} ({pairs} alternating pairs, "
        f"{len(prompts)} prompts, {MAX_NEW_TOKENS} tokens, {params / 1e6:.2f}M parameters)",
        f"same greedy path on both sides: {same}",
    ]
    return Result(
        key="record",
        figure=f"record() vs bare generate(output_logits=True), {label}",
        target=f"≤ {TARGET:.2f}×" if judged else "report",
        spread=ratios,
        unit="×",
        headline=f"{ratios.median:.2f}×",
        met=met,
        notes=notes,
        details=details,
    )


def run(smoke: bool) -> list[Result]:
    from pytest_genguard.tiny import tiny_model, tiny_tokenizer

    tokenizer = tiny_tokenizer()
    results = [_measure(tiny_model("gpt2"), tokenizer, "tiny gpt2", 2 if smoke else 40, True, smoke)]
    if not smoke:
        big = tiny_model("llama", **BIG)
        results.append(_measure(big, tokenizer, "26M-param llama", 12, False, smoke))
    return results
