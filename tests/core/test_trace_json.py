"""The JSON form of traces: exact round trips, a diff-friendly layout, and useful errors for bad files."""

from __future__ import annotations

import dataclasses
import json
import math
import random
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings

from pytest_genguard.core.jsontext import float32, format_float
from pytest_genguard.core.trace import (
    GenerationTrace,
    ModelFingerprint,
    PromptTrace,
    Step,
    TokenizerFingerprint,
    TraceFormatError,
)
from pytest_genguard.strategies import traces

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
REFERENCE = FIXTURES / "reference" / "greedy_small.json"
PROPERTY = settings(max_examples=30, deadline=None)
SNAPSHOT_FIX = "pytest --snapshot-update"


def assert_same(a: Any, b: Any, where: str = "trace") -> None:
    """Structural equality where floats must be bit-identical (NaN equals NaN, -0.0 differs from 0.0)."""
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) and math.isnan(b):
            return
        assert a == b and math.copysign(1.0, a) == math.copysign(1.0, b), f"{where}: {a!r} != {b!r}"
        return
    assert type(a) is type(b), f"{where}: {type(a).__name__} != {type(b).__name__}"
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        for f in dataclasses.fields(a):
            assert_same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    elif isinstance(a, tuple | list):
        assert len(a) == len(b), f"{where}: length {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, Mapping):
        assert list(a) == list(b) or sorted(a) == sorted(b), f"{where}: keys {sorted(a)} != {sorted(b)}"
        for key in a:
            assert_same(a[key], b[key], f"{where}[{key!r}]")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def realistic_trace(n_steps: int = 100, k: int = 5, seed: int = 0) -> GenerationTrace:
    """A confident fine-tuned model's greedy path: top-1 near 0, the rest far below, GPT-2-sized ids."""
    rng = random.Random(seed)
    words = [" the", " quick", " brown", " fox", " jumps", " over", " lazy", " dog", ".", ",", "ing", "\n"]
    steps = []
    for _ in range(n_steps):
        ids = rng.sample(range(50257), k)
        lps = sorted([-rng.uniform(0.0, 0.05)] + [-rng.uniform(5.0, 14.0) for _ in range(k - 1)], reverse=True)
        lps = [float32(v) for v in lps]
        steps.append(Step(ids[0], rng.choice(words), lps[0], lps[0], tuple(ids), tuple(lps)))
    return GenerationTrace(
        prompts=(PromptTrace("the quick", (464, 2068), tuple(steps), "length", "".join(s.token for s in steps)),),
        settings={"do_sample": False, "max_new_tokens": n_steps, "top_k": k},
        model=ModelFingerprint("gpt2", "a" * 64, "b" * 64, 127488, "float32"),
        tokenizer=TokenizerFingerprint("tiny", 512, "c" * 64),
        environment={
            "device": "cpu",
            "dtype": "float32",
            "python": "3.11.7",
            "torch": "2.13.0",
            "transformers": "5.23",
        },
    )


def step_lines(text: str) -> list[str]:
    return [line for line in text.split("\n") if line.lstrip().startswith('{"id": ')]


# ---------------------------------------------------------------------------------------------------- properties


@PROPERTY
@given(traces(allow_nan=True))
def test_round_trip_reproduces_every_float32_value_token_and_setting(trace: GenerationTrace) -> None:
    assert_same(GenerationTrace.from_json(trace.to_json()), trace)


@PROPERTY
@given(traces(allow_nan=True))
def test_output_is_valid_json_that_json_loads_parses(trace: GenerationTrace) -> None:
    doc = json.loads(trace.to_json())
    assert doc["schema"] == 1
    assert len(doc["prompts"]) == len(trace.prompts)


@PROPERTY
@given(traces(allow_nan=True))
def test_each_step_is_one_line_that_parses_alone(trace: GenerationTrace) -> None:
    text = trace.to_json()
    lines = step_lines(text)
    assert len(lines) == sum(len(p.steps) for p in trace.prompts)
    for line, step in zip(lines, (s for p in trace.prompts for s in p.steps), strict=True):
        parsed = json.loads(line.strip().removesuffix(","))
        assert parsed["id"] == step.token_id
        assert parsed["token"] == step.token
    # Editors and str.splitlines() also break lines at U+2028/U+2029/U+0085: those must be escaped too.
    assert len(text.splitlines()) == text.count("\n")


@PROPERTY
@given(traces(allow_nan=True))
def test_serialization_is_stable_and_canonical(trace: GenerationTrace) -> None:
    text = trace.to_json()
    assert trace.to_json() == text
    assert GenerationTrace.from_json(text).to_json() == text
    assert text.endswith("}\n")


def test_keys_come_in_a_fixed_order_metadata_first() -> None:
    doc = json.loads(REFERENCE.read_text(encoding="utf-8"))
    assert list(doc) == ["schema", "settings", "model", "tokenizer", "environment", "prompts"]
    assert list(doc["prompts"][0]) == ["prompt", "prompt_ids", "finish_reason", "text", "steps"]
    step = doc["prompts"][0]["steps"][0]
    assert list(step) == ["id", "token", "logprob", "score", "margin", "top_ids", "top_logprobs"]
    assert list(doc["settings"]) == sorted(doc["settings"])


def test_a_100_step_top5_trace_fits_in_25_kb() -> None:
    size = len(realistic_trace().to_json().encode("utf-8"))
    print(f"100-step top-5 trace: {size} bytes")
    assert size <= 25_000


def test_floats_are_the_shortest_text_that_round_trips_the_float32_value() -> None:
    assert format_float(0.1) == "0.1"
    assert format_float(-0.0125) == "-0.0125"
    assert format_float(-0.0) == "-0.0"
    assert format_float(3.0) == "3.0"
    assert format_float(math.nan) == '"nan"'
    assert format_float(-math.inf) == '"-inf"'
    value = float32(-1.2345678901)
    assert float32(float(format_float(value))) == value
    assert len(format_float(value).lstrip("-").replace(".", "")) <= 9


def test_lone_surrogate_tokens_keep_their_exact_bytes() -> None:
    trace = GenerationTrace.from_json(REFERENCE.read_text(encoding="utf-8"))
    first, second = trace.prompts[1].steps[:2]
    assert first.token_bytes == b"\xc3"
    assert second.token_bytes == b"\xa9"
    assert (first.token_bytes + second.token_bytes).decode("utf-8") == "é"
    assert '"\\udcc3"' in trace.to_json()


# ---------------------------------------------------------------------------------------------------- fixtures


def test_reference_trace_reads_and_rewrites_byte_for_byte() -> None:
    text = REFERENCE.read_text(encoding="utf-8")
    trace = GenerationTrace.from_json(text, source=str(REFERENCE))
    assert [p.prompt for p in trace.prompts] == ["the quick", "caf"]
    assert trace.prompts[0].token_ids == (212, 57, 9, 2)
    assert trace.prompts[0].steps[1].margin == 4.0
    assert trace.settings["repetition_penalty"] == 1.0
    assert trace.model is not None and trace.model.dtype == "float32"
    assert trace.to_json() == text


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("truncated.json", "not valid JSON"),
        ("not_json.json", "not valid JSON"),
        ("schema2.json", "schema 2 is not supported"),
        ("wrong_types.json", "prompts[0].steps[1].logprob: expected a number, found '-0.03125'"),
    ],
)
def test_corrupt_file_raises_trace_format_error_naming_the_file_and_the_fix(name: str, problem: str) -> None:
    path = FIXTURES / "corrupt" / name
    with pytest.raises(TraceFormatError) as info:
        GenerationTrace.from_json(path.read_text(encoding="utf-8"), source=str(path))
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    assert problem in message
    assert SNAPSHOT_FIX in message


def _edited(edit: Any) -> str:
    doc = json.loads(REFERENCE.read_text(encoding="utf-8"))
    edit(doc)
    return json.dumps(doc)


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (lambda d: d.pop("prompts"), "document: missing key 'prompts'"),
        (lambda d: d["prompts"][0]["steps"][2].pop("id"), "prompts[0].steps[2]: missing key 'id'"),
        (lambda d: d["prompts"][1].pop("finish_reason"), "prompts[1]: missing key 'finish_reason'"),
        (lambda d: d["model"].pop("weights_hash"), "model: missing key 'weights_hash'"),
        (lambda d: d["tokenizer"].pop("hash"), "tokenizer: missing key 'hash'"),
    ],
)
def test_missing_key_raises_naming_where_it_is_missing(edit: Any, problem: str) -> None:
    with pytest.raises(TraceFormatError, match="snapshot-update") as info:
        GenerationTrace.from_json(_edited(edit), source="snap/trace.json")
    assert str(info.value).startswith(f"snap/trace.json: {problem}")


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (lambda d: d["prompts"][0]["steps"][0].update(id=True), "prompts[0].steps[0].id: expected an integer"),
        (lambda d: d["prompts"][0]["steps"][0].update(top_ids="212"), "expected a list"),
        (lambda d: d["prompts"][0]["steps"][0]["top_logprobs"].pop(), "top_ids has 3 entries but top_logprobs has 2"),
        (lambda d: d["prompts"][0].update(finish_reason="done"), "'done' is not one of eos, length, stop"),
        (lambda d: d["prompts"].__setitem__(0, []), "prompts[0]: expected an object, found list"),
        (lambda d: d["environment"].update(torch=["2.13"]), "environment.torch: expected a scalar"),
        (lambda d: d.update(schema=True), "schema True is not supported"),
        (lambda d: d.update(schema="1"), "schema '1' is not supported"),
    ],
)
def test_hand_edited_wrong_types_raise_naming_the_field(edit: Any, problem: str) -> None:
    with pytest.raises(TraceFormatError, match="snapshot-update") as info:
        GenerationTrace.from_json(_edited(edit), source="snap/trace.json")
    assert problem in str(info.value)
    assert str(info.value).startswith("snap/trace.json: ")


@pytest.mark.parametrize("text", ["", "[" * 100_000, '{"schema": 1, "prompts": [], "n": ' + "9" * 5000 + "}", "[]"])
def test_pathological_documents_raise_trace_format_error_not_other_errors(text: str) -> None:
    with pytest.raises(TraceFormatError, match=r"bad\.json"):
        GenerationTrace.from_json(text, source="bad.json")


# ---------------------------------------------------------------------------------------------------- token texts


def test_alternative_token_texts_round_trip_last_and_compact() -> None:
    texts = {7: "\n", 12: " the", 40: "\udce2", 300: "\u2028", **{1000 + i: f" w{i}" for i in range(40)}}
    trace = dataclasses.replace(realistic_trace(n_steps=3), token_texts=texts)
    text = trace.to_json()
    assert list(json.loads(text)) == [
        "schema",
        "settings",
        "model",
        "tokenizer",
        "environment",
        "prompts",
        "token_texts",
    ]
    block = text[text.index('"token_texts"') :].splitlines()
    assert 3 < len(block) < 12 and all(len(line) <= 120 for line in block)  # several entries a line
    back = GenerationTrace.from_json(text)
    assert back.token_texts == texts and back.to_json() == text
    assert len(text.splitlines()) == text.count("\n")  # U+2028 escaped like in tokens


def test_a_trace_without_token_texts_reads_and_writes_as_before() -> None:
    text = REFERENCE.read_text(encoding="utf-8")
    trace = GenerationTrace.from_json(text)
    assert trace.token_texts == {}
    assert '"token_texts"' not in trace.to_json() and trace.to_json() == text


def test_token_texts_are_display_data_not_part_of_equality() -> None:
    trace = realistic_trace(n_steps=2)
    named = dataclasses.replace(trace, token_texts={5: " x"})
    assert named == trace
    assert named.token_text(5) == " x" and trace.token_text(5) is None
    assert trace.token_text(trace.prompts[0].steps[0].token_id) == trace.prompts[0].steps[0].token


@pytest.mark.parametrize(
    ("texts", "problem"),
    [
        ({"x": " a"}, "token_texts.x: expected a token id (a decimal integer) as the key"),
        ({"-3": " a"}, "token_texts.-3: expected a token id"),
        ({"12": 5}, "token_texts.12: expected a string, found 5"),
    ],
)
def test_hand_edited_token_texts_raise_naming_the_entry(texts: dict[str, object], problem: str) -> None:
    doc = json.loads(realistic_trace(n_steps=1).to_json())
    doc["token_texts"] = texts
    with pytest.raises(TraceFormatError, match=re.escape(problem)):
        GenerationTrace.from_json(json.dumps(doc))
    doc["token_texts"] = [1, 2]
    with pytest.raises(TraceFormatError, match="token_texts: expected an object, found list"):
        GenerationTrace.from_json(json.dumps(doc))
