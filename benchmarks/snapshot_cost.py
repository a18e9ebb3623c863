"""Snapshot cost: comparing two 1000-step top-5 traces, and the size of a 100-step top-5 snapshot file.

Traces come from `record()` on the tiny llama (2048 positions, `min_new_tokens` forcing the length). The compared
"actual" trace is the recorded one with every logprob nudged by a relative 1e-6 (within the fp32 tolerance), so the
comparison walks every step and value and ends "within tolerance" rather than taking any identical-input shortcut.

The headline of the compare figure is what `assert trace == genguard_snapshot` costs beyond syrupy's file reading:
serialize the received trace, then `compare_documents()` (parse both, `compare()`, render the explanation).
"""

from __future__ import annotations

import dataclasses
import json
import re
import tempfile
from collections import Counter
from typing import Any

from benchmarks.harness import Result, ms, profile, repeat

STEPS = 1000
SIZE_STEPS = 100
COMPARE_AIM_MS = 20.0
SIZE_TARGET = 25_000
NUDGE = 1e-6
_FIELD = re.compile(r'"(\w+)": (\[[^\]]*\]|"(?:[^"\\]|\\.)*"|[^,}]+)')


def _nudged(trace: Any) -> Any:
    from pytest_genguard.core.jsontext import float32

    def step(s: Any) -> Any:
        return dataclasses.replace(
            s,
            logprob=float32(s.logprob * (1 + NUDGE)),
            top_logprobs=tuple(float32(v * (1 + NUDGE)) for v in s.top_logprobs),
        )

    prompts = tuple(dataclasses.replace(p, steps=tuple(step(s) for s in p.steps)) for p in trace.prompts)
    return dataclasses.replace(trace, prompts=prompts)


def _trace(steps: int) -> Any:
    from pytest_genguard.hf.record import record
    from pytest_genguard.hf.tiny import tiny_model, tiny_tokenizer

    model = tiny_model("llama", max_position_embeddings=2048)
    return record(model, tiny_tokenizer(), ["the quick"], max_new_tokens=steps, min_new_tokens=steps, top_k=5)


def run_compare(smoke: bool) -> list[Result]:
    from pytest_genguard.core.compare import compare
    from pytest_genguard.core.documents import compare_documents
    from pytest_genguard.core.jsontext import format_float
    from pytest_genguard.core.trace import GenerationTrace

    steps = 20 if smoke else STEPS
    n = 2 if smoke else 25
    expected = _trace(steps)
    actual = _nudged(expected)
    stored = expected.to_json()
    verdict = compare_documents(actual.to_json(), stored).verdict

    def assertion() -> Any:
        return compare_documents(actual.to_json(), stored)

    full = repeat(assertion, n)
    parts = {
        "to_json() of the received trace": repeat(actual.to_json, n),
        "from_json() of one trace": repeat(lambda: GenerationTrace.from_json(stored), n),
        "compare() of the parsed traces": repeat(lambda: compare(expected, actual), n),
        "compare() of identical traces": repeat(lambda: compare(expected, expected), n),
    }
    floats = [v for p in actual for st in p.steps for v in (st.logprob, st.score, *st.top_logprobs)]
    floats += [st.best_score for p in actual for st in p.steps if st.best_score is not None]
    formatting = repeat(lambda: [format_float(v) for v in floats], n)
    decoding = repeat(lambda: json.loads(stored), n)
    full_ms = full.scaled(1000)
    met = full_ms.median < COMPARE_AIM_MS
    details = [
        f"- serialize + compare_documents(), ms min/median/max: {full_ms.text('{:.1f}')}",
        *(f"- {name}: {ms(s.median)} (median of {n})" for name, s in parts.items()),
        f"- verdict: {verdict}; {steps} steps, top-5, one prompt",
        f"- where to_json() goes: `format_float()` (the shortest decimal that round-trips each float32 value, "
        f"tried at 6..9 digits) of the {len(floats)} floats alone takes {ms(formatting.median)}",
        f"- where from_json() goes: `json.loads` alone takes {ms(decoding.median)}; the rest is building and "
        f"type-checking every value in Python (each error must name its path), twice per snapshot check (the "
        f"received trace is serialized, then parsed back)",
    ]
    if not met:
        details.append(
            "- the aim is out of reach for the whole path in pure Python: every float is formatted once and parsed "
            'twice with per-value checks. What would cut it: `compare_documents` answering "identical" when the two '
            "texts are equal (the common case, no parsing at all), and comparing the received trace object instead "
            "of parsing back the text just serialized from it"
        )
        calls = 1 if smoke else 5
        head = f"Profile of {calls} serialize + compare_documents() calls:"
        details += ["", head, "", *profile(assertion, calls=calls)]
    compare_ms = parts["compare() of the parsed traces"].median * 1000
    return [
        Result(
            key="compare",
            figure=f"snapshot compare, two {steps}-step top-5 traces (serialize + parse + compare + explain)",
            target=f"report; aim < {COMPARE_AIM_MS:.0f} ms",
            spread=full_ms,
            unit=" ms",
            headline=f"{full_ms.median:.1f} ms (compare() alone {compare_ms:.1f} ms)",
            met=met,
            notes=[f"verdict {verdict}; compare() of parsed traces alone {compare_ms:.1f} ms"],
            details=details,
        )
    ]


def _field_bytes(text: str) -> tuple[int, dict[str, float]]:
    """Bytes outside the step lines, and the mean bytes per step of each step field (`"key": value, ` included)."""
    lines = [line for line in text.splitlines() if line.lstrip().startswith('{"id"')]
    fields: Counter[str] = Counter()
    for line in lines:
        for m in _FIELD.finditer(line):
            fields[m.group(1)] += len(m.group(0)) + 2
    outside = len(text.encode("utf-8")) - sum(len(line.encode("utf-8")) + 1 for line in lines)
    return outside, {k: v / max(1, len(lines)) for k, v in fields.items()}


def _finetuned_bytes_per_step() -> str:
    """Bytes per step of the default fine-tuned model's probe trace (sharp distributions: different digits)."""
    from pytest_genguard.hf.finetune import finetune
    from pytest_genguard.hf.record import record
    from pytest_genguard.hf.tiny import probe_prompts

    with tempfile.TemporaryDirectory(prefix="genguard-bench-size-") as cache:
        tuned = finetune("gpt2", cache_dir=cache, progress=False)
    trace = record(tuned.model, tuned.tokenizer, probe_prompts(), max_new_tokens=24, top_k=5)
    _, fields = _field_bytes(trace.to_json())
    per_step = sum(fields.values())
    return (
        f"fine-tuned default gpt2 on the {len(trace)} probe prompts: {per_step:.0f} bytes per step "
        f"(a 100-step trace of such steps ≈ {(100 * per_step + 1500) / 1000:.1f} KB)"
    )


def _metadata_parts(trace: Any) -> dict[str, int]:
    """Bytes the trace's architecture config and its token_texts add to the file."""
    size = len(trace.to_json().encode("utf-8"))
    model = dataclasses.replace(trace.model, config=None) if trace.model is not None else None
    return {
        "config": size - len(dataclasses.replace(trace, model=model).to_json().encode("utf-8")),
        "token_texts": size - len(dataclasses.replace(trace, token_texts={}).to_json().encode("utf-8")),
    }


def run_size(smoke: bool) -> list[Result]:
    trace = _trace(SIZE_STEPS)
    text = trace.to_json()
    size = len(text.encode("utf-8"))
    steps = len(trace.prompts[0].steps)
    outside, fields = _field_bytes(text)
    breakdown = ", ".join(f"`{k}` {v:.0f}" for k, v in sorted(fields.items(), key=lambda kv: -kv[1]))
    details = [
        f"- tiny llama (untrained), one prompt, `min_new_tokens={SIZE_STEPS}`; the file is `to_json()` as written",
        f"- {outside} bytes of metadata (settings, fingerprints, environment, prompt); per step "
        f"{sum(fields.values()) + 9:.0f} bytes (indent included), mean bytes per field: {breakdown}",
    ]
    redundant = {k: fields[k] for k in ("margin", "best_score") if k in fields}
    if redundant:
        equal = all(s.best_score in (None, s.score) for p in trace for s in p.steps)
        without = size - steps * sum(redundant.values())
        details.append(
            f"- of each step, {sum(redundant.values()):.0f} bytes repeat other fields: `margin` (top_logprobs[0] - "
            f"top_logprobs[1], written for the reader, never read back) and `best_score` (equal to `score` at every "
            f"step of this greedy trace: {equal}); without them this file would be {without / 1000:.1f} KB"
        )
    parts = _metadata_parts(trace)
    details.append(
        f"- of the metadata, {parts['config']} bytes are the model's architecture config (what keeps a snapshot the "
        f"same subject across transformers versions) and {parts['token_texts']} bytes `token_texts` (the texts of "
        f"{len(trace.token_texts)} alternatives no step chose, for the report and the failure text): without them "
        f"this file would be {(size - parts['config'] - parts['token_texts']) / 1000:.1f} KB"
    )
    if not smoke:
        details.append(f"- {_finetuned_bytes_per_step()}")
    return [
        Result(
            key="size",
            figure=f"snapshot file size, {steps} steps, top-5",
            target=f"≤ {SIZE_TARGET // 1000} KB",
            spread=None,
            unit="",
            headline=f"{size / 1000:.1f} KB ({size} bytes)",
            met=size <= SIZE_TARGET,
            notes=[f"{(size - outside) / steps:.0f} bytes per step + {outside} bytes metadata; KB = 1000 bytes"],
            details=details,
        )
    ]
