"""`verify(trace)` (one teacher-forced forward pass) vs re-recording the same trace (`record()` + `compare()`).

Tiny llama built with 2048 positions (the default tiny config has 256), one prompt, n new tokens. Every variant must
run the full n steps, so EOS is put out of reach: the output layer gets a bias of -1e4 on the EOS logit (an untrained
model otherwise ends some paths early, and which ones changes with its initialisation). Variants: plain greedy (no
logits processor), then one processor each: `repetition_penalty=1.2`, `no_repeat_ngram_size=3`, `min_new_tokens=n`.
verify() re-applies those processors to the teacher-forced logits of every step at once.

The judged size is 240 tokens. "One forward pass is the limit": the plain greedy row is also timed against a bare
forward pass over prompt + path (`model(input_ids)`, no cache), what verify() cannot go below; and again on a
26M-parameter llama (report only), where the forward pass is no longer tiny beside verify()'s fixed costs.
"""

from __future__ import annotations

from typing import Any

from benchmarks.harness import Paired, Result, alternate, ms, profile

PROMPT = "the quick"
TARGET_AT = 240
TARGET_RATIO = 20.0
AIM_RATIO = 35.0
FORWARD_LIMIT = 1.5
VARIANTS: dict[str, dict[str, Any]] = {
    "plain greedy": {},
    "repetition_penalty=1.2": {"repetition_penalty": 1.2},
    "no_repeat_ngram_size=3": {"no_repeat_ngram_size": 3},
    "min_new_tokens": {"min_new_tokens": None},  # = n
}


def without_eos(model: Any, eos_id: int) -> Any:
    """`model` with a bias of -1e4 on the EOS logit: no greedy or penalized path ends before max_new_tokens."""
    import torch

    head = model.get_output_embeddings()
    biased = torch.nn.Linear(head.in_features, head.out_features, bias=True)
    with torch.no_grad():
        biased.weight.copy_(head.weight)
        biased.bias.zero_()
        biased.bias[eos_id] = -1e4
    model.set_output_embeddings(biased)
    return model


def _kwargs(variant: str, n: int) -> dict[str, Any]:
    return {k: (n if v is None else v) for k, v in VARIANTS[variant].items()}


def _pair(model: Any, tokenizer: Any, n: int, pairs: int, **kwargs: Any) -> tuple[Paired, str, Any, Any]:
    """Alternating timings (re-record, verify) for an n-step trace, the verdicts, verify itself and the trace."""
    from pytest_genguard.core.compare import compare
    from pytest_genguard.hf.record import record
    from pytest_genguard.hf.verify import verify

    trace = record(model, tokenizer, [PROMPT], max_new_tokens=n, **kwargs)
    if len(trace.prompts[0].steps) != n:
        raise RuntimeError(f"verify benchmark: the trace with {kwargs} is {len(trace.prompts[0].steps)} steps, not {n}")

    def regenerate() -> Any:
        return compare(trace, record(model, tokenizer, [PROMPT], max_new_tokens=n, **kwargs))

    def teacher_forced() -> Any:
        return verify(model, tokenizer, trace)

    verdicts = f"verify: {teacher_forced().verdict.value}, re-recording: {regenerate().verdict.value}"
    return alternate(regenerate, teacher_forced, pairs), verdicts, teacher_forced, trace


BIG: dict[str, Any] = {
    "hidden_size": 512,
    "intermediate_size": 1376,
    "num_hidden_layers": 8,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
}
"""A 26M-parameter llama (with the tiny tokenizer's vocabulary)."""


def _forward_limit(
    model: Any, trace: Any, teacher_forced: Any, pairs: int, judged: bool, label: str = "tiny llama"
) -> Result:
    """verify() against the one forward pass it cannot avoid."""
    import torch

    p = trace.prompts[0]
    ids = torch.tensor([list(p.prompt_ids) + list(p.token_ids)])

    def forward() -> Any:
        with torch.no_grad():
            return model(input_ids=ids, use_cache=False)

    paired = alternate(teacher_forced, forward, pairs)
    ratios = paired.ratios
    n = len(p.steps)
    return Result(
        key="verify",
        figure=f"verify() vs one bare forward pass, {label}, {n} tokens, plain greedy",
        target=f"≤ {FORWARD_LIMIT:g}× (the limit)" if judged else "report",
        spread=ratios,
        unit="×",
        headline=f"{ratios.median:.2f}×",
        met=ratios.median <= FORWARD_LIMIT if judged else None,
        notes=[
            f"verify {ms(paired.a.median)} vs forward {ms(paired.b.median)} (medians of {pairs} alternating pairs)",
            "what verify() adds to the forward pass: log-softmax and top-k of every step, the Step objects, the "
            "fingerprints and compare()",
        ],
        details=[
            f"- verify() seconds min/median/max: {paired.a.text('{:.4f}')}",
            f"- forward seconds min/median/max: {paired.b.text('{:.4f}')}",
        ],
    )


def run(smoke: bool) -> list[Result]:
    from pytest_genguard.hf.tiny import tiny_model, tiny_tokenizer

    tokenizer = tiny_tokenizer()
    model = without_eos(tiny_model("llama", max_position_embeddings=2048), int(tokenizer.eos_token_id))
    sizes: dict[int, tuple[int, tuple[str, ...]]] = (
        {8: (1, tuple(VARIANTS))}
        if smoke
        else {
            64: (15, ("plain greedy", "repetition_penalty=1.2")),
            TARGET_AT: (9, tuple(VARIANTS)),
            1024: (5, ("plain greedy", "repetition_penalty=1.2", "no_repeat_ngram_size=3")),
        }
    )
    limit_at = 8 if smoke else TARGET_AT  # the forward-pass row runs in --smoke too (unjudged there)
    results = []
    for n, (pairs, variants) in sizes.items():
        for variant in variants:
            paired, verdicts, teacher_forced, trace = _pair(model, tokenizer, n, pairs, **_kwargs(variant, n))
            ratios = paired.ratios
            judged = n == TARGET_AT
            met = ratios.median >= TARGET_RATIO if judged else None
            notes = [
                f"verify {ms(paired.b.median)} vs re-record {ms(paired.a.median)} "
                f"(medians of {pairs} alternating pairs)",
                f"verdicts {verdicts}",
            ]
            if judged:
                reached = "reached" if ratios.median >= AIM_RATIO else "not reached"
                notes.append(f"aim ≥ {AIM_RATIO:.0f}×: {reached}")
            details = [
                f"- verify() seconds min/median/max: {paired.b.text('{:.4f}')}",
                f"- record()+compare() seconds min/median/max: {paired.a.text('{:.4f}')}",
            ]
            if met is False:
                calls = 1 if smoke else 10
                details += ["", f"Profile of {calls} verify() calls:", "", *profile(teacher_forced, calls=calls)]
            results.append(
                Result(
                    key="verify",
                    figure=f"verify() vs re-recording, tiny llama, {n} tokens, {variant}",
                    target=f"≥ {TARGET_RATIO:.0f}× faster (aim ≥ {AIM_RATIO:.0f}×)"
                    if judged
                    else f"report (judged at {TARGET_AT})",
                    spread=ratios,
                    unit="×",
                    headline=f"{ratios.median:.1f}× faster",
                    met=met,
                    notes=notes,
                    details=details,
                )
            )
            if n == limit_at and variant == "plain greedy":
                results.append(_forward_limit(model, trace, teacher_forced, 2 if smoke else 30, judged=not smoke))
    if not smoke:
        results.append(_big_forward_limit(tokenizer, TARGET_AT))
    return results


def _big_forward_limit(tokenizer: Any, n: int) -> Result:
    from pytest_genguard.hf.record import record
    from pytest_genguard.hf.tiny import tiny_model
    from pytest_genguard.hf.verify import verify

    big = without_eos(tiny_model("llama", max_position_embeddings=2048, **BIG), int(tokenizer.eos_token_id))
    trace = record(big, tokenizer, [PROMPT], max_new_tokens=n)
    params = sum(p.numel() for p in big.parameters())
    return _forward_limit(
        big, trace, lambda: verify(big, tokenizer, trace), 10, judged=False, label=f"{params / 1e6:.0f}M-param llama"
    )
