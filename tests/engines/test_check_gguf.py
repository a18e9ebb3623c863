"""`genguard check-gguf GGUF SNAPSHOT...` on the real chat model: exit 0 when the GGUF holds, 1 for a regression or a
file outside its budget, 2 for bad input (named, with the fix), 3 when its tokenizer or metadata is not the model's
(each mismatch named). Without --budget the file type decides: an F32 file the float32 rule (f32 KV cache) or the fp16
preset (f16), a quantized one its type's preset, a type without one is bad input."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import pytest
from install_lines import installs_by_name

from pytest_genguard import cli
from pytest_genguard.core.trace import dumps


@pytest.fixture(scope="module")
def snapshot(reference: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The float32 reference (with its calibration) written as a snapshot file."""
    path = tmp_path_factory.mktemp("gguf-snapshot") / "test_chat.genguard"
    path.write_text(dumps(reference), encoding="utf-8")
    return path


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(["check-gguf", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_missing_or_non_gguf_file_is_bad_input_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    snap = tmp_path / "x.genguard"
    code, _, err = run(capsys, str(tmp_path / "absent.gguf"), str(snap))
    assert code == 2
    assert f"GGUF {tmp_path / 'absent.gguf'}: no such file" in err
    text = tmp_path / "model.gguf"
    text.write_text("not a gguf", encoding="utf-8")
    code, _, err = run(capsys, str(text), str(snap))
    assert (code, "not a GGUF file (it does not start with b'GGUF')" in err) == (2, True)


def test_an_unknown_budget_or_snapshot_is_bad_input(
    snapshot: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_genguard.hf.smollm2 import gguf_path

    code, _, err = run(capsys, str(gguf_path()), str(snapshot), "--budget", "q4")
    assert (code, "unknown fidelity budget 'q4'" in err) == (2, True)
    code, _, err = run(capsys, str(gguf_path()), str(tmp_path))
    assert (code, f"{tmp_path}: no .genguard files found" in err) == (2, True)


def test_without_the_extra_it_names_the_install_command(
    snapshot: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_genguard.hf.smollm2 import gguf_path

    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # import llama_cpp now raises ImportError
    code, _, err = run(capsys, str(gguf_path()), str(snapshot))
    assert code == 2
    assert '[llama_cpp]" (the clone genguard was installed from' in err and 'pip install "llama-cpp-python==' in err
    assert not installs_by_name(err), err


def test_the_f32_file_holds_and_the_eps_bug_regresses(
    snapshot: Path, folder: Path, f32_gguf: Path, capsys: pytest.CaptureFixture[str], edits: Any
) -> None:
    model = ("--model", str(folder), "--no-long-probe")  # the F32 probe: test_long_probe_smollm2.py
    code, out, _ = run(capsys, str(f32_gguf), str(snapshot), "--kv-cache", "f32", *model)
    assert code == 0, out
    assert "judged by float32 rule: an F32 file with an f32 KV cache computes in float32\n" in out
    assert "(F32, KV cache f32): holds (float32 rule)" in out
    bad = edits(f32_gguf, "gguf_set_metadata", "llama.attention.layer_norm_rms_epsilon", "1e-4")
    code, out, _ = run(capsys, str(bad), str(snapshot), "--kv-cache", "f32", *model)
    assert code == 1, out  # a regression outranks the stale metadata it also names
    assert "stale: metadata: llama.attention.layer_norm_rms_epsilon" in out
    assert "REGRESSION (float32 rule)" in out


def test_a_default_pre_tokenizer_is_stale_and_named(
    snapshot: Path, f32_gguf: Path, capsys: pytest.CaptureFixture[str], edits: Any
) -> None:
    bad = edits(f32_gguf, "gguf_new_metadata", "--pre-tokenizer", "default")
    code, out, _ = run(capsys, str(bad), str(snapshot), "--kv-cache", "f32")  # no --model: the GGUF's own reading
    assert code == 3, out
    assert "stale: tokenizer: '3333+777 = 4110' (built-in corpus)" in out


@pytest.mark.usefixtures("llama_cpp_extra")
def test_the_shipped_q4_1_is_judged_by_its_type_preset_and_the_rope_bug_in_it_is_outside(
    snapshot: Path, folder: Path, capsys: pytest.CaptureFixture[str], edits: Any
) -> None:
    from pytest_genguard.hf.smollm2 import gguf_path

    model = ("--model", str(folder), "--no-long-probe")
    code, out, _ = run(capsys, str(gguf_path()), str(snapshot), *model)
    assert code == 0, out
    assert "judged by preset gguf-q4_1: the preset of file type Q4_1\n" in out
    assert "(Q4_1, KV cache f16): within\n" in out and "exact (full vocabulary, float64)" in out
    assert "not compared" not in out  # every step of every path, a flip counted, never the end of a path
    assert "relative to the reference model's own int8 conversion" in out  # the snapshot's calibration scales it
    code, out, _ = run(capsys, str(gguf_path()), str(snapshot), "--budget", "int8", *model)
    assert (code, "judged by --budget int8\n" in out) == (0, True), out
    bad = edits(gguf_path(), "gguf_set_metadata", "llama.rope.freq_base", "10000")
    code, out, _ = run(capsys, str(bad), str(snapshot), *model)
    assert code == 1, out
    assert "(Q4_1, KV cache f16): OUTSIDE THE BUDGET" in out
    assert "stale: metadata: llama.rope.freq_base" in out


def test_an_f32_file_with_llama_cpps_f16_kv_cache_is_judged_by_its_caches_own_cost_and_the_eps_bug_is_outside(
    snapshot: Path, folder: Path, f32_gguf: Path, capsys: pytest.CaptureFixture[str], edits: Any
) -> None:
    # The cache is the only lossy part of an F32 file: its budget scales the reference's own attention over an f16
    # cache (the snapshot's kv-f16 calibration), not a whole-model fp16 cast, which costs SmolLM2 30x more and held
    # the epsilon bug (27x the correct file's KLD) within fp16.
    model = ("--model", str(folder), "--no-long-probe")
    code, out, _ = run(capsys, str(f32_gguf), str(snapshot), *model)
    assert code == 0, out
    assert "judged by preset kv-f16: an F32 file whose f16 KV cache alone is lossy" in out
    assert "relative to the reference model's own kv-f16 conversion" in out
    assert "(F32, KV cache f16): within\n" in out
    # Its negative control: the epsilon bug, which no quantized file's preset sees, is outside kv-f16.
    bad = edits(f32_gguf, "gguf_set_metadata", "llama.attention.layer_norm_rms_epsilon", "1e-4")
    code, out, _ = run(capsys, str(bad), str(snapshot), *model)
    assert code == 1, out
    assert "(F32, KV cache f16): OUTSIDE THE BUDGET" in out


@pytest.mark.usefixtures("llama_cpp_extra")
def test_a_bound_that_proves_nothing_exits_4_naming_how_to_prove_it_and_a_calibrated_one_0(
    reference: Any, snapshot: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_genguard.engines.gguf_check import GGUFJudge
    from pytest_genguard.hf.smollm2 import gguf_path

    # A budget judges from the GGUF's config: its weights are never dequantized (a 4-bit file's float32 model is eight
    # times its size; only the float32 rule takes a model, for its trace's generation config and fingerprint).
    monkeypatch.setattr(GGUFJudge, "hf_model", lambda self: pytest.fail("a budget dequantized the GGUF's weights"))
    # Without --model the figures are the snapshot's top-5 bounds, every step compared from llama.cpp's full
    # distribution: within the calibrated snapshot's bounds (its own int8 measured like for like) is proven ...
    code, out, _ = run(capsys, str(gguf_path()), str(snapshot))
    assert code == 0, out
    assert "(Q4_1, KV cache f16): within" in out and "not compared" not in out
    # ... without the calibration the same bounds prove nothing: exit 4, never 0
    bare = tmp_path / "bare.genguard"
    bare.write_text(dumps(dataclasses.replace(reference, calibration={})), encoding="utf-8")
    code, out, _ = run(capsys, str(gguf_path()), str(bare))
    assert code == 4, out
    assert "UNPROVEN (within on lower bounds only, which proves nothing)" in out
    assert "pytest_genguard.calibrate(model, tokenizer, trace)" in out and "--model DIR" in out


@pytest.mark.usefixtures("llama_cpp_extra")
def test_a_file_type_without_a_preset_is_bad_input_naming_budget(
    snapshot: Path, capsys: pytest.CaptureFixture[str], edits: Any
) -> None:
    from pytest_genguard.hf.smollm2 import gguf_path

    # The shipped file relabelled Q4_0 (general.file_type 2): no preset measured for it.
    relabelled = edits(gguf_path(), "gguf_set_metadata", "general.file_type", "2")
    code, out, err = run(capsys, str(relabelled), str(snapshot))
    assert (code, out) == (2, "")
    assert f"GGUF {relabelled}: file type Q4_0 has no preset" in err
    assert "pass --budget (a preset: bf16, fp16, int8, int4, gguf-q8_0, gguf-q6_k, gguf-q4_k_m, gguf-q4_1" in err


def test_each_file_type_has_one_judgement() -> None:
    from pytest_genguard.engines.gguf_check import judgement

    assert judgement("F32", "f32")[0] is None  # the float32 rule
    chosen = {kind: judgement(kind, "f16")[0] for kind in ("F32", "BF16", "Q8_0", "Q6_K", "Q4_K_M", "Q4_1")}
    assert {kind: None if b is None else b.name for kind, b in chosen.items()} == {
        "F32": "kv-f16",
        "BF16": "bf16",
        "Q8_0": "gguf-q8_0",
        "Q6_K": "gguf-q6_k",
        "Q4_K_M": "gguf-q4_k_m",
        "Q4_1": "gguf-q4_1",
    }
    with pytest.raises(ValueError, match=r"file type Q5_K_M has no preset .*; pass --budget"):
        judgement("Q5_K_M", "f16")
    # An F32 file's cache decides: each cache type its own preset; a quantized file's preset was measured with the
    # f16 cache, so another cache type asks for a budget or a baseline.
    assert [judgement("F32", kind)[0].name for kind in ("bf16", "q8_0", "q4_0")] == ["kv-bf16", "kv-q8_0", "kv-q4_0"]
    # With an f32 cache, a model whose tanh GELU llama.cpp reads from a float16 table (Gemma) is lossy there alone.
    tabled, why = judgement("F32", "f32", tabled=True)
    assert tabled is not None and tabled.name == "kv-f32" and "a float16 table" in why
    with pytest.raises(ValueError, match="file type Q8_0 with a q4_0 KV cache has no preset"):
        judgement("Q8_0", "q4_0")


def test_the_kv_cache_types_are_one_list_for_the_engine_the_copies_and_the_presets() -> None:
    from pytest_genguard.core.budget import KV_CACHE_PRESETS, KV_CACHE_TYPES
    from pytest_genguard.hf.kv_cache_copies import CACHE_TYPES

    assert set(KV_CACHE_TYPES) == {"f32", *KV_CACHE_PRESETS} and set(CACHE_TYPES) == set(KV_CACHE_PRESETS)
    llama_cpp = pytest.importorskip("pytest_genguard.engines.llama_cpp", reason="the llama_cpp extra")
    assert set(llama_cpp.KV_CACHES) == set(KV_CACHE_TYPES)


@pytest.mark.usefixtures("llama_cpp_extra")
def test_against_a_baseline_the_shipped_file_itself_is_within_and_its_rope_edit_outside(
    snapshot: Path, folder: Path, capsys: pytest.CaptureFixture[str], edits: Any
) -> None:
    from pytest_genguard.hf.smollm2 import gguf_path

    shipped = str(gguf_path())
    model = ("--model", str(folder), "--no-long-probe")  # the probe against a baseline: test_long_probe_*.py
    code, out, _ = run(capsys, shipped, str(snapshot), "--baseline", shipped, *model)
    assert code == 0, out
    assert f"judged by the baseline {gguf_path().name}: its KLD measured in this run against the same reference" in out
    assert "(Q4_1, KV cache f16): within\n" in out and "relative to the baseline" in out
    bad = edits(gguf_path(), "gguf_set_metadata", "llama.rope.freq_base", "10000")
    code, out, _ = run(capsys, str(bad), str(snapshot), "--baseline", shipped, *model)
    assert code == 1, out
    assert "(Q4_1, KV cache f16): OUTSIDE THE BASELINE" in out and "kld_mean" in out
    code, _, err = run(capsys, shipped, str(snapshot), "--baseline", shipped, "--budget", "int8")
    assert (code, "--budget and --baseline: pass one" in err) == (2, True)
    code, _, err = run(capsys, shipped, str(snapshot), "--baseline", str(snapshot))
    assert (code, f"--baseline {snapshot}: not a GGUF file" in err) == (2, True)
