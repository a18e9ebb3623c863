"""`genguard check-gguf GGUF SNAPSHOT...` on the real chat model: exit 0 when the GGUF holds, 1 for a regression or a
file outside its budget, 2 for bad input (named, with the fix), 3 when its tokenizer or metadata is not the model's
(each mismatch named)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from gguf_support import edited

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
    assert 'pip install "pytest-genguard[llama_cpp]"' in err


def test_the_f32_file_holds_and_the_eps_bug_regresses(
    snapshot: Path, folder: Path, f32_gguf: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, str(f32_gguf), str(snapshot), "--kv-cache", "f32", "--model", str(folder))
    assert code == 0, out
    assert "(F32, KV cache f32): holds (float32 rule)" in out
    bad = edited(f32_gguf, tmp_path, "gguf_set_metadata", "llama.attention.layer_norm_rms_epsilon", "1e-4")
    code, out, _ = run(capsys, str(bad), str(snapshot), "--kv-cache", "f32", "--model", str(folder))
    assert code == 1, out  # a regression outranks the stale metadata it also names
    assert "stale: metadata: llama.attention.layer_norm_rms_epsilon" in out
    assert "REGRESSION (float32 rule)" in out


def test_a_default_pre_tokenizer_is_stale_and_named(
    snapshot: Path, f32_gguf: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = edited(f32_gguf, tmp_path, "gguf_new_metadata", "--pre-tokenizer", "default")
    code, out, _ = run(capsys, str(bad), str(snapshot), "--kv-cache", "f32")  # no --model: the GGUF's own reading
    assert code == 3, out
    assert "stale: tokenizer: '3333+777 = 4110' (built-in corpus)" in out


def test_the_shipped_q4_1_holds_its_budget_and_not_the_float32_rule_and_the_rope_bug_is_outside_it(
    snapshot: Path, folder: Path, f32_gguf: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_genguard.hf.smollm2 import gguf_path

    model = ("--model", str(folder))
    code, out, _ = run(capsys, str(gguf_path()), str(snapshot), "--budget", "int8", *model)
    assert code == 0, out
    assert "(Q4_1, KV cache f16): holds" in out
    assert "relative to the reference model's own int8 conversion" in out  # the snapshot's calibration scales it
    code, out, _ = run(capsys, str(gguf_path()), str(snapshot), *model)
    assert code == 1, out
    bad = edited(f32_gguf, tmp_path, "gguf_set_metadata", "llama.rope.freq_base", "10000")
    code, out, _ = run(capsys, str(bad), str(snapshot), "--budget", "int8", *model)
    assert code == 1, out
    assert "(F32, KV cache f16): OUTSIDE THE BUDGET" in out
