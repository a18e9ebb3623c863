"""Gemma 3 270M's GGUF, as shipped (Q4_K_M), judged by `genguard check-gguf --model` in every run: within its type's
preset at every step, exact (the float32 reference is dequantized from that very file, so what remains is llama.cpp's
own arithmetic: 1.6x the model's own int8), and its tokenizer and metadata conform (the tokenizer genguard builds from
the GGUF's vocabulary encodes the corpus as llama.cpp does). Its negative controls are the rope edits of its Q8_0 and
of this very file, judged by the same `GGUFJudge` (tests/engines/test_long_probe_gemma3.py, test_gguf_baseline.py);
an rms epsilon edited in its metadata (outside, the key named) was measured by hand and left to SmolLM2's files
(test_check_gguf.py), which hold that path per run at a 49,152-token vocabulary instead of 262,144.

Without --model (bounds over the snapshot's top-k) it is within, proven, against a calibrated snapshot and unproven
(exit 4) against an uncalibrated one, measured by hand: that path reads the GGUF's tokenizer with transformers'
converter, 25 s of CPU at 262,144 tokens, and its logic is held on SmolLM2 (test_check_gguf.py). The bugs of the
float32 model, on the paths and past the window, are in tests/hf/test_real_model_fidelity.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_genguard import cli
from pytest_genguard.core.trace import dumps

pytestmark = pytest.mark.xdist_group("gemma3-gguf")  # one worker holds Gemma's model and GGUF state (CONTRIBUTING.md)


@pytest.fixture(scope="module")
def shipped(gemma3_folder: Path) -> Path:
    from pytest_genguard.hf.gemma3 import gemma3_gguf

    return gemma3_gguf()


@pytest.fixture(scope="module")
def snapshot(gemma3_reference: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The calibrated reference as a snapshot file."""
    path = tmp_path_factory.mktemp("gemma3-snapshot") / "test_gemma3.genguard"
    path.write_text(dumps(gemma3_reference), encoding="utf-8")
    return path


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = cli.main(["check-gguf", *args])
    return code, capsys.readouterr().out


def test_with_its_model_every_step_is_exact_and_its_tokenizer_and_metadata_conform(
    shipped: Path, snapshot: Path, gemma3_folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = run(capsys, str(shipped), str(snapshot), "--model", str(gemma3_folder), "--no-long-probe")
    assert code == 0, out
    assert "(Q4_K_M, KV cache f16): within\n" in out and "48 steps, exact (full vocabulary, float64)" in out
    assert "stale" not in out  # llama.cpp's tokenizer and the GGUF's metadata are the model's
