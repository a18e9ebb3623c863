"""The GGUF-type presets on the real chat model (SmolLM2-135M-Instruct): each file llama.cpp's own tools make of the
float32 folder (convert_hf_to_gguf.py's Q8_0; llama_model_quantize's Q6_K, Q4_K_M and Q4_1 of its F32 file), and the
shipped Q4_1, holds the preset of its file type, relative to the snapshot's int8 calibration and by the fixed limits;
two realistic bugs in the same file are outside it: the rope base 1e5 -> 1e4 in the metadata, and one FFN norm weight
x1.25 (its tensor edited in the file; quantized files keep norms in float32). The converter's BF16 holds `bf16`, which
check-gguf picks for it, and the norm bug in it does not. The measured margins are in docs/engines.md
(benchmarks/gguf_presets.py).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from gguf_support import scaled_tensor

from pytest_genguard.core.budget import GGUF_TYPE_PRESETS, PRESETS, traces_report


@pytest.mark.parametrize(
    ("outtype", "kind"), [("q8_0", "Q8_0"), ("q6_k", "Q6_K"), ("q4_k_m", "Q4_K_M"), ("q4_1", "Q4_1")]
)
def test_llama_cpps_own_file_holds_its_type_preset_and_a_rope_or_norm_bug_in_it_does_not(
    outtype: str,
    kind: str,
    folder: Path,
    reference: Any,
    gguf_of: Any,
    tmp_path: Path,
    genguard_engine: Any,
    edits: Any,
) -> None:
    from pytest_genguard.engines.llama_cpp import file_type

    path = gguf_of(outtype)
    assert file_type(path) == kind
    preset = PRESETS[GGUF_TYPE_PRESETS[kind]]
    assert preset.name == f"gguf-{outtype}"
    llama = genguard_engine("llama_cpp")  # llama.cpp's default f16 KV cache: what the file is run with

    def judged(gguf: Path) -> tuple[bool, bool]:
        # as check-gguf judges without --model: every step, the snapshot's top-5 bounds, llama.cpp's full distribution
        relative = llama.fidelity(folder, reference=reference, converted=gguf, budget=preset, exact=False)
        assert relative.skipped == 0 and relative.budget is not None
        assert "relative to the reference model's own int8" in relative.budget.basis
        # the fixed limits judge the same steps (a budget never changes what was measured: one llama.cpp pass a file)
        fixed = dataclasses.replace(relative, budget=preset.calibrated(None))
        assert fixed.budget is not None and "SmolLM2-135M-Instruct alone" in fixed.budget.basis
        return relative.holds, fixed.holds

    assert judged(path) == (True, True)
    rope = edits(path, "gguf_set_metadata", "llama.rope.freq_base", "10000")
    assert judged(rope) == (False, False)
    norm = scaled_tensor(path, tmp_path / "norm.gguf", "blk.10.ffn_norm.weight", 1.25)
    assert judged(norm) == (False, False)


def test_the_converters_bf16_holds_the_bf16_preset_and_a_norm_bug_in_it_does_not(
    folder: Path, reference: Any, gguf_of: Any, tmp_path: Path, genguard_engine: Any
) -> None:
    from pytest_genguard.engines.gguf_check import judgement

    path = gguf_of("bf16")
    budget, _ = judgement("BF16", "f16")
    assert budget is PRESETS["bf16"]
    llama = genguard_engine("llama_cpp")
    report = traces_report(reference, llama.record(folder, reference=reference, converted=path), budget)
    assert report.budget is not None and "relative to the reference model's own bf16" in report.budget.basis
    assert report.holds, str(report)
    norm = scaled_tensor(path, tmp_path / "norm.gguf", "blk.10.ffn_norm.weight", 1.25)
    assert not traces_report(reference, llama.record(folder, reference=reference, converted=norm), budget).holds


def test_the_shipped_q4_1_holds_its_type_preset(folder: Path, reference: Any, genguard_engine: Any) -> None:
    from pytest_genguard.hf.smollm2 import gguf_path

    trace = genguard_engine("llama_cpp").record(folder, reference=reference, converted=gguf_path())
    assert trace.environment["gguf_file_type"] == "Q4_1"
    report = traces_report(reference, trace, PRESETS["gguf-q4_1"])
    assert report.holds, str(report)


@pytest.mark.usefixtures("llama_cpp_extra")
def test_an_unknown_outtype_or_preset_lists_the_known_ones(genguard_engine: Any) -> None:
    from pytest_genguard.core.budget import parse_budget
    from pytest_genguard.engines.llama_cpp import OUTTYPES, quantize

    with pytest.raises(ValueError, match="outtype='q3_k'; choose one of f32, bf16, q8_0, q6_k, q5_k_m, q4_k_m, q4_1"):
        genguard_engine("llama_cpp", outtype="q3_k")
    assert OUTTYPES == ("f32", "bf16", "q8_0", "q6_k", "q5_k_m", "q4_k_m", "q4_1")
    with pytest.raises(ValueError, match="quantize\\(\\) makes q6_k, q5_k_m, q4_k_m, q4_1, not 'q8_0'"):
        quantize(Path("in.gguf"), Path("out.gguf"), "q8_0")
    with pytest.raises(ValueError, match="'gguf-q4_k_m', 'gguf-q4_1'"):
        parse_budget("Q4_K_M")
