"""``pytest --genguard-gguf FILE``: a user's project, unedited, also judges a GGUF of its model against every snapshot
it asserts (the real chat model, SmolLM2-135M-Instruct: llama.cpp's converter's F32 file, its Q8_0, and the bug copies
of the llama.cpp tests). The project runs in a subprocess, as a user's would."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gguf_support import edited
from vllm_server import served_project


def test_the_f32_file_holds_with_an_f32_cache_and_the_rope_bug_fails_the_assertion(
    reference: Any, f32_gguf: Path, tmp_path: Path
) -> None:
    run = served_project(tmp_path / "project", reference.to_json())
    assert run("--snapshot-update").returncode == 0
    held = run("--genguard-gguf", str(f32_gguf), "--genguard-gguf-kv-cache", "f32")
    assert held.returncode == 0, held.stdout[-3000:]
    bad = edited(f32_gguf, tmp_path, "gguf_set_metadata", "llama.rope.freq_base", "10000")
    failed = run("--genguard-gguf", str(bad), "--genguard-gguf-kv-cache", "f32", "-vv")
    assert failed.returncode == 1, failed.stdout[-3000:]
    assert "on the GGUF (--genguard-gguf model-gguf_set_metadata.gguf): regression" in failed.stdout


def test_a_quantized_file_is_judged_by_its_types_preset_and_a_default_pre_tokenizer_is_stale(
    reference: Any, f32_gguf: Path, folder: Path, tmp_path: Path, genguard_engine: Any
) -> None:
    run = served_project(tmp_path / "project", reference.to_json())
    assert run("--snapshot-update").returncode == 0
    q8 = genguard_engine("llama_cpp", outtype="q8_0").convert(folder) / "model.gguf"
    held = run("--genguard-gguf", str(q8), "-vv", "-rA")
    assert held.returncode == 0, held.stdout[-3000:]
    pre = edited(f32_gguf, tmp_path, "gguf_new_metadata", "--pre-tokenizer", "default")
    stale = run("--genguard-gguf", str(pre), "-vv")
    assert stale.returncode == 1, stale.stdout[-3000:]
    assert "is stale on the GGUF (--genguard-gguf" in stale.stdout
    assert "tokenizer: '3333+777 = 4110'" in stale.stdout


def test_a_missing_file_is_a_usage_error_naming_the_option(reference: Any, tmp_path: Path) -> None:
    run = served_project(tmp_path / "project", reference.to_json())
    result = run("--genguard-gguf", str(tmp_path / "nope.gguf"))
    assert result.returncode == 4
    assert "--genguard-gguf" in result.stderr and "no such file or folder; pass the .gguf file llama.cpp runs" in (
        result.stderr
    )
