"""Every step compared, unproven never a pass, and the long probe, on real GGUF files made by llama.cpp's own converter
and quantizer: a tiny model with sliding-window layers (Gemma 3's text architecture, window 16: tests/support/
swa_model.py) and the real chat model (SmolLM2-135M-Instruct).

A snapshot of short prompts (none past the window) cannot see a rope base or a sliding-window edit; the long probe
(2,048 tokens of a built-in text, both sides in process, exact) can. The correct Q8_0 is within, proven, every step
compared; the edits are outside by the probe though the snapshot holds. Judges are built from the session's model,
so the probe's reference side is computed once per model (`hf.long_probe.reference_chunks`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from swa_model import WINDOW, save_swa_model

from pytest_genguard import calibrate, record

SHORT = ["The history of", "We hold these", "Four score and"]
"""Prompts that, with their 6 steps, stay within the window of 16."""


@pytest.fixture(scope="session")
def swa(tmp_path_factory: pytest.TempPathFactory, llama_cpp_extra: None) -> tuple[Path, Any, Any]:
    """The sliding-window model's folder, its model and tokenizer (loaded once)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = save_swa_model(tmp_path_factory.mktemp("swa") / "model")
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    return folder, model, AutoTokenizer.from_pretrained(folder)


@pytest.fixture(scope="session")
def swa_snapshot(swa: tuple[Path, Any, Any]) -> Any:
    """Its short greedy snapshot, calibrated (int8: the gguf-* presets' scale)."""
    _, model, tokenizer = swa
    trace = record(model, tokenizer, SHORT, max_new_tokens=6, top_k=5, do_sample=False)
    return calibrate(model, tokenizer, trace, precisions=("int8",))


@pytest.fixture(scope="session")
def swa_q8(swa: tuple[Path, Any, Any], genguard_engine: Any) -> Path:
    """llama.cpp's converter's Q8_0 of it (its Q4_K_M is outside gguf-q4_k_m: the final norm's x12 sharpens the
    tied head's 4-bit rounding too, benchmarks/long_probe.py)."""
    return Path(genguard_engine("llama_cpp", outtype="q8_0").convert(swa[0])) / "model.gguf"


def judge_on(path: Path, hf: tuple[Any, Any], model_dir: Path | None, genguard_engine: Any) -> Any:
    """A check-gguf judge of `path` on the session's Hugging Face side."""
    from pytest_genguard.engines.gguf_check import GGUFJudge
    from pytest_genguard.engines.llama_cpp import file_type

    model, tokenizer = hf
    return GGUFJudge(path, "f16", file_type(path), model, tokenizer, genguard_engine("llama_cpp"), model_dir)


def test_a_correct_q8_0_is_within_proven_at_every_step_and_on_the_long_probe(
    swa: tuple[Path, Any, Any], swa_snapshot: Any, swa_q8: Path, genguard_engine: Any
) -> None:
    folder, model, tokenizer = swa
    judged = judge_on(swa_q8, (model, tokenizer), folder, genguard_engine).judge(swa_snapshot)
    report = judged.report
    assert judged.how == "preset gguf-q8_0: the preset of file type Q8_0"
    assert report.exact and report.skipped == 0
    assert int(report.metrics["steps"]) == sum(len(p.steps) for p in swa_snapshot.prompts)  # every step
    assert report.status == "within" and judged.holds, str(judged)
    assert report.coverage is not None and not report.coverage.passes_window
    assert "WARNING: no prompt passes the sliding window" in str(report)
    probe = report.probe
    assert probe is not None and probe.status == "within" and int(probe.metrics["steps"]) == 2047
    assert report.probe_info is not None and report.probe_info.sliding_window == WINDOW
    assert "both measured on the probe" in report.probe_info.basis
    # Without the model in process: every step still compared, on the snapshot's top-k; proven against the
    # calibrated snapshot (like for like), unproven without its calibration: never a pass on a bound alone.
    bounded = judge_on(swa_q8, (model, tokenizer), None, genguard_engine)
    calibrated = bounded.judge(swa_snapshot)
    assert calibrated.report.skipped == 0 and not calibrated.report.exact and calibrated.report.probe is None
    assert calibrated.status == "within", str(calibrated)
    uncalibrated = bounded.judge(dataclasses.replace(swa_snapshot, calibration={}))
    assert uncalibrated.status == "unproven" and not uncalibrated.holds, str(uncalibrated)
    assert "pytest_genguard.calibrate(model, tokenizer, trace)" in str(uncalibrated)


@pytest.mark.parametrize(
    ("key", "value"), [("gemma3.rope.freq_base", "100000"), ("gemma3.attention.sliding_window", "32")]
)
def test_a_rope_base_or_window_edit_is_outside_by_the_long_probe_though_the_short_snapshot_holds(
    key: str,
    value: str,
    swa: tuple[Path, Any, Any],
    swa_snapshot: Any,
    swa_q8: Path,
    genguard_engine: Any,
    edits: Any,
) -> None:
    folder, model, tokenizer = swa
    bad = edits(swa_q8, "gguf_set_metadata", key, value)
    report = judge_on(bad, (model, tokenizer), folder, genguard_engine).judge(swa_snapshot).report
    assert report.own_status == "within"  # the snapshot, within the window, cannot see it
    assert report.probe is not None and report.probe.status == "outside", str(report)
    assert report.status == "outside" and not report.holds
    text = str(report)
    assert "long probe OUTSIDE" in text and "<- the divergence starts here" in text
    started = next(line for line in text.splitlines() if "divergence starts" in line)
    first = int(started.split("positions ")[1].split("-")[0])
    assert first >= WINDOW // 2, started  # past the first positions: where a long-context bug shows


def test_check_gguf_exits_1_on_the_window_edit_and_names_it(
    swa: tuple[Path, Any, Any],
    swa_snapshot: Any,
    swa_q8: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    edits: Any,
) -> None:
    from pytest_genguard import cli
    from pytest_genguard.core.trace import dumps

    snapshot = tmp_path / "test_short.genguard"
    snapshot.write_text(dumps(swa_snapshot), encoding="utf-8")
    bad = edits(swa_q8, "gguf_set_metadata", "gemma3.attention.sliding_window", "32")
    code = cli.main(["check-gguf", str(bad), str(snapshot), "--model", str(swa[0])])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "long probe OUTSIDE: 2048 tokens of the built-in long text" in out
    assert "(Q8_0, KV cache f16): OUTSIDE THE BUDGET" in out


def test_smollm2s_rope_base_edit_is_outside_at_long_context_and_its_correct_q8_0_within(
    hf: tuple[Any, Any], folder: Path, reference: Any, gguf_of: Any, genguard_engine: Any, edits: Any
) -> None:
    q8 = gguf_of("q8_0")
    judged = judge_on(q8, hf, folder, genguard_engine).judge(reference)
    assert judged.status == "within" and judged.report.skipped == 0, str(judged)
    bad = edits(q8, "gguf_set_metadata", "llama.rope.freq_base", "200000")
    report = judge_on(bad, hf, folder, genguard_engine).judge(reference).report
    assert report.probe is not None and report.probe.status == "outside", str(report)
    assert report.status == "outside"


def test_an_f32_file_with_an_f32_cache_holds_the_float32_rule_and_its_long_probe_fp16(
    hf: tuple[Any, Any], folder: Path, reference: Any, f32_gguf: Path, genguard_engine: Any, edits: Any
) -> None:
    # The float32 rule's allowance is a short path's rounding: over the probe's 2,048 positions llama.cpp's and
    # torch's float32 sums drift past it with no bug (3.4e-5 in a logprob at position 401), so the probe of an F32
    # file is judged by fp16 (on the probe), which a rope edit still breaks.
    from pytest_genguard.engines.gguf_check import GGUFJudge

    model, tokenizer = hf
    llama = genguard_engine("llama_cpp", kv_cache="f32")
    judged = GGUFJudge(f32_gguf, "f32", "F32", model, tokenizer, llama, folder).judge(reference)
    assert judged.report is None and judged.probe is not None and judged.probe.budget is not None
    assert judged.status == "holds", str(judged)
    assert "long probe within fp16" in str(judged)
    bad = edits(f32_gguf, "gguf_set_metadata", "llama.rope.freq_base", "200000")
    broken = GGUFJudge(bad, "f32", "F32", model, tokenizer, llama, folder).judge(reference)
    assert broken.probe is not None and not broken.probe.holds and broken.status == "regression", str(broken)
