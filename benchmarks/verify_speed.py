"""`verify(trace)` (one teacher-forced forward pass) vs re-generating the same trace (`record()` + `compare()`).

Tiny llama built with 2048 positions (the default tiny config has 256), one prompt, `min_new_tokens = max_new_tokens
= n` so EOS cannot end the path early. `min_new_tokens` is itself a logits processor that verify() must re-apply at
every step, so each size is measured twice: a plain greedy trace (no processors; the untrained model does not reach
EOS within 1024 tokens, checked) and the `min_new_tokens` trace. Both have exactly n steps.
"""

from __future__ import annotations

from typing import Any

from benchmarks.harness import Paired, Result, alternate, ms, profile, repeat

PROMPT = "the quick"
TARGET_AT = 256
TARGET_RATIO = 20.0


def _pair(model: Any, tokenizer: Any, n: int, pairs: int, **kwargs: Any) -> tuple[Paired, str, Any] | None:
    """Alternating timings (re-generate, verify) for an n-step trace; None when the path is not n steps long."""
    from pytest_genguard.compare import compare
    from pytest_genguard.record import record
    from pytest_genguard.verify import verify

    trace = record(model, tokenizer, [PROMPT], max_new_tokens=n, **kwargs)
    if len(trace.prompts[0].steps) != n:
        return None

    def regenerate() -> Any:
        return compare(trace, record(model, tokenizer, [PROMPT], max_new_tokens=n, **kwargs))

    def teacher_forced() -> Any:
        return verify(model, tokenizer, trace)

    verdicts = f"verify: {teacher_forced().verdict.value}, re-generation: {regenerate().verdict.value}"
    return alternate(regenerate, teacher_forced, pairs), verdicts, teacher_forced


def _processor_cost(n: int, tokenizer: Any, repeats: int) -> tuple[float, float]:
    """Seconds to apply a MinNewTokens processor to n steps through a LogitsProcessorList, and called directly."""
    import torch
    from transformers import LogitsProcessorList, MinNewTokensLengthLogitsProcessor

    processors = LogitsProcessorList([MinNewTokensLengthLogitsProcessor(3, n, int(tokenizer.eos_token_id))])
    ids = torch.zeros((1, n + 3), dtype=torch.long)
    logits = torch.randn((1, n, len(tokenizer)))

    def listed() -> Any:
        return [processors(ids[:, : 3 + t], logits[:, t].clone()) for t in range(n)]

    def direct() -> Any:
        out = []
        for t in range(n):
            scores = logits[:, t].clone()
            for processor in processors:
                scores = processor(ids[:, : 3 + t], scores)
            out.append(scores)
        return out

    if not all(torch.equal(a, b) for a, b in zip(listed(), direct(), strict=True)):
        raise RuntimeError("verify benchmark: direct processor calls differ from LogitsProcessorList")
    return repeat(listed, repeats).median, repeat(direct, repeats).median


def run(smoke: bool) -> list[Result]:
    from pytest_genguard.tiny import tiny_model, tiny_tokenizer

    tokenizer = tiny_tokenizer()
    model = tiny_model("llama", max_position_embeddings=2048)
    sizes = {8: 1} if smoke else {64: 15, 256: 9, 1024: 5}
    results = []
    for n, pairs in sizes.items():
        for variant, kwargs in (("plain greedy", {}), ("min_new_tokens", {"min_new_tokens": n})):
            measured = _pair(model, tokenizer, n, pairs, **kwargs)
            if measured is None:
                raise RuntimeError(f"verify benchmark: the {variant} trace is not {n} steps long (EOS came early)")
            paired, verdicts, teacher_forced = measured
            ratios = paired.ratios
            judged = n == TARGET_AT
            met = ratios.median >= TARGET_RATIO if judged else None
            notes = [
                f"verify {ms(paired.b.median)} vs re-generate {ms(paired.a.median)} "
                f"(medians of {pairs} alternating pairs)",
                f"verdicts {verdicts}",
            ]
            details = [
                f"- verify() seconds min/median/max: {paired.b.text('{:.4f}')}",
                f"- record()+compare() seconds min/median/max: {paired.a.text('{:.4f}')}",
            ]
            if kwargs:
                listed, direct = _processor_cost(n, tokenizer, 1 if smoke else 5)
                details.append(
                    f"- `min_new_tokens` adds a logits processor, which verify() re-applies step by step on the "
                    f"teacher-forced logits. Measured alone on {n} steps: {ms(listed)} through "
                    f"`LogitsProcessorList.__call__`, {ms(direct)} calling the processor directly (the difference is "
                    f"the list running `inspect.signature` on every processor at every step)"
                )
                details.append(
                    "- so a trace recorded with processors costs verify() one Python-level processor call per step "
                    "on top of the single forward pass; calling the processors directly in teacher.py (signatures "
                    "checked once) would remove the list's share, the processor's own work per step stays"
                )
            if met is False or (judged and kwargs and not smoke):
                calls = 1 if smoke else 10
                details += ["", f"Profile of {calls} verify() calls:", "", *profile(teacher_forced, calls=calls)]
            results.append(
                Result(
                    key="verify",
                    figure=f"verify() vs re-generating, tiny llama, {n} tokens, {variant}",
                    target=f"≥ {TARGET_RATIO:.0f}× faster" if judged else f"report (target is at {TARGET_AT})",
                    spread=ratios,
                    unit="×",
                    headline=f"{ratios.median:.1f}× faster",
                    met=met,
                    notes=notes,
                    details=details,
                )
            )
    return results
