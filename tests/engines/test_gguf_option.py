"""``pytest --genguard-gguf FILE``: a user's project, unedited, also judges a GGUF of its model against every snapshot
it asserts (the real chat model, SmolLM2-135M-Instruct: llama.cpp's converter's F32 file, its Q8_0, and the bug copies
of the llama.cpp tests). The project is a user's, one run per file after its snapshot is written once; the runs are
in this process (pytester's), which has torch, transformers and llama.cpp imported already: as seven subprocesses
they took 121 s of CPU, 64 in process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from vllm_server import served_project_in_process


@pytest.fixture(scope="module")
def files(f32_gguf: Path, gguf_of: Any, edits: Any) -> dict[str, Path]:
    """The files the runs judge, made before `pytester` (function scope) points HOME at its folder, where genguard
    would not find llama.cpp's converter and scripts."""
    return {
        "rope": edits(f32_gguf, "gguf_set_metadata", "llama.rope.freq_base", "10000"),
        "q8_0": gguf_of("q8_0"),  # llama.cpp's converter's, with the quantizer of its own
        "pre": edits(f32_gguf, "gguf_new_metadata", "--pre-tokenizer", "default"),
    }


def test_each_file_is_judged_as_check_gguf_judges_it(
    reference: Any, f32_gguf: Path, folder: Path, files: dict[str, Path], pytester: pytest.Pytester
) -> None:
    run = served_project_in_process(pytester, reference.to_json())
    assert run("--snapshot-update").returncode == 0
    # the config and tokenizer (else transformers reads the GGUF's); the long probe left out: each run would read it
    # again in its own process (tests/engines/test_long_probe_smollm2.py judges it)
    model = ("--genguard-gguf-model", str(folder), "--genguard-gguf-no-probe")
    # The F32 file with an f32 KV cache: the float32 rule, under the test's tolerances; its metadata as the config's.
    held = run("--genguard-gguf", str(f32_gguf), "--genguard-gguf-kv-cache", "f32", *model)
    assert held.returncode == 0, held.stdout[-3000:]
    # Its negative controls: the rope base edited. With the model's folder the metadata check names it (stale);
    # without it, the GGUF's own config agrees with itself and the logits regress.
    rope = files["rope"]
    named = run("--genguard-gguf", str(rope), "--genguard-gguf-kv-cache", "f32", "-vv", *model)
    assert named.returncode == 1 and "metadata: llama.rope.freq_base: expected 100000.0" in named.stdout, named.stdout
    failed = run("--genguard-gguf", str(rope), "--genguard-gguf-kv-cache", "f32", "-vv")
    assert failed.returncode == 1, failed.stdout[-3000:]
    assert "on the GGUF (--genguard-gguf model-gguf_set_metadata.gguf): regression, judged by float32 rule" in (
        failed.stdout
    )
    # The converter's Q8_0 with llama.cpp's own f16 cache: judged by its file type's preset, and within it.
    q8 = files["q8_0"]
    assert run("--genguard-gguf", str(q8), *model).returncode == 0
    # A default pre-tokenizer: stale, named by the tokenizer check (no logit of the snapshot's ids moves).
    pre = files["pre"]
    stale = run("--genguard-gguf", str(pre), "--genguard-gguf-kv-cache", "f32", "-vv", *model)
    assert stale.returncode == 1, stale.stdout[-3000:]
    assert "is stale on the GGUF (--genguard-gguf model-gguf_new_metadata.gguf)" in stale.stdout
    assert "tokenizer: '3333+777 = 4110'" in stale.stdout


def test_a_missing_file_is_a_usage_error_naming_the_option(pytester: pytest.Pytester) -> None:
    run = served_project_in_process(pytester, "{}")  # refused when the run is configured, before any test
    result = run("--genguard-gguf", str(pytester.path / "nope.gguf"))
    assert result.returncode == 4
    assert "--genguard-gguf" in result.stderr
    assert "no such file or folder; pass the .gguf file llama.cpp runs" in result.stderr
