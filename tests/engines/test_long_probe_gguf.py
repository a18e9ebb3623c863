"""Every step compared, unproven never a pass, and the long probe, on real GGUF files made by llama.cpp's own converter
and quantizer from a tiny model with sliding-window layers (Gemma 3's text architecture, window 16:
tests/support/swa_model.py); the real chat model's long probe is test_long_probe_smollm2.py.

A snapshot of short prompts (none past the window) cannot see a rope base or a sliding-window edit; the long probe
(2,048 tokens of a built-in text, both sides in process, exact) can. The correct Q8_0 is within, proven, every step
compared; the edits are outside by the probe though the snapshot holds. Judges are built from the session's model,
so the probe's reference side is computed once per model (`hf.long_probe.reference_chunks`); nothing here needs the
real chat model's reference.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from gguf_support import edited, judge_on
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
    # the band it starts in holds the window's edge (bands span 128 positions at least: core.long_context.MIN_BAND)
    start, _ = report.probe.band_violations[0]
    assert start.start <= WINDOW < start.end and f"{start.name}: KLD mean" in text


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


def test_the_probe_streamed_from_llama_cpp_is_its_one_pass_bit_for_bit(
    swa: tuple[Path, Any, Any], swa_q8: Path, genguard_engine: Any
) -> None:
    """The long probe reads a GGUF a chunk at a time (llama.cpp's output buffer one chunk's rows, not the probe's:
    `engines.base.StreamedLogits`); the logits are the one pass's, bit for bit, and every position is there."""
    import numpy

    from pytest_genguard.engines.base import StreamedLogits
    from pytest_genguard.hf.long_probe import CHUNK, probe_ids

    _, model, tokenizer = swa
    ids = probe_ids(tokenizer, model.config)
    session = genguard_engine("llama_cpp").backend.load(swa_q8)
    assert isinstance(session, StreamedLogits)
    streamed = list(session.chunks(ids, CHUNK))
    assert [len(c) for c in streamed] == [min(CHUNK, len(ids) - s) for s in range(0, len(ids), CHUNK)]
    (one_pass,) = session([ids])
    assert numpy.array_equal(numpy.concatenate(streamed), one_pass)
    assert not numpy.array_equal(streamed[0], streamed[1][: len(streamed[0])])  # positions, not one row repeated


def test_a_files_probe_is_stored_by_its_bytes_and_read_back_by_a_later_judge_never_for_another_file(
    swa: tuple[Path, Any, Any],
    swa_snapshot: Any,
    swa_q8: Path,
    genguard_engine: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A team's CI judges the same shipped file every run: its probe is stored in genguard's cache by the file's
    bytes (`hf.probe_store`) and a later judge of those bytes (another path, another process) reads it instead of
    running llama.cpp and the KLD again; an edited file is never handed another file's probe."""
    import shutil

    from pytest_genguard.core.files import file_sha256
    from pytest_genguard.hf import long_probe
    from pytest_genguard.hf.probe_store import STEPS_FILE

    folder, model, tokenizer = swa
    monkeypatch.setenv("GENGUARD_CACHE_DIR", str(tmp_path / "cache"))
    first = shutil.copyfile(swa_q8, tmp_path / "shipped.gguf")  # a new file state: this process has not read it
    judged = judge_on(first, (model, tokenizer), folder, genguard_engine).judge(swa_snapshot)
    assert judged.report.probe is not None
    (stored,) = (tmp_path / "cache" / "long-probe").glob(f"*/{STEPS_FILE}")
    assert file_sha256(first) in (stored.parent / "manifest.json").read_text(encoding="utf-8")

    monkeypatch.setattr(long_probe, "probe_steps", lambda *args: pytest.fail("the stored probe was read again"))
    again = shutil.copyfile(swa_q8, tmp_path / "downloaded-again.gguf")
    rejudged = judge_on(again, (model, tokenizer), folder, genguard_engine).judge(swa_snapshot)
    assert rejudged.report.probe is not None and rejudged.status == judged.status
    assert rejudged.report.probe.metrics == judged.report.probe.metrics
    # Its negative control: the window edited in a copy of those bytes is another file, whose probe is read.
    bad = edited(swa_q8, tmp_path, "gguf_set_metadata", "gemma3.attention.sliding_window", "32")
    with pytest.raises(pytest.fail.Exception, match="the stored probe was read again"):
        judge_on(bad, (model, tokenizer), folder, genguard_engine).judge(swa_snapshot)
