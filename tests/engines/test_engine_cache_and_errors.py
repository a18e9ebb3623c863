"""Conversions are cached by the weights' fingerprint; a missing engine, an unknown name or a wrong folder say what
to do."""

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from engine_support import reference
from install_lines import installs_by_name

from pytest_genguard.engines import EngineUnavailable, engine
from pytest_genguard.hf.tiny import tiny_model, tiny_tokenizer

ROOT = Path(__file__).resolve().parents[2]


def test_a_conversion_is_built_once_per_weights(genguard_engine: Any, saved: dict[str, Path], tmp_path: Path) -> None:
    ct2 = dataclasses.replace(genguard_engine("ctranslate2"), cache_dir=tmp_path / "cache")  # an empty cache
    first = ct2.convert(saved["gpt2"])
    assert first.parent == tmp_path / "cache" / "engines" / "ctranslate2"
    build_id = json.loads((first / "manifest.json").read_text())["build_id"]
    assert ct2.convert(saved["gpt2"]) == first
    assert json.loads((first / "manifest.json").read_text())["build_id"] == build_id  # not rebuilt
    other = tmp_path / "other-weights"
    tiny_model("gpt2", seed=1).save_pretrained(other)
    with pytest.raises(ValueError, match="needs the tokenizer saved in the same folder"):
        ct2.convert(other)
    tiny_tokenizer().save_pretrained(other)
    assert ct2.convert(other) != first  # other weights: another entry


def test_a_tokenizer_changed_in_place_is_converted_again(
    genguard_engine: Any, saved: dict[str, Path], tmp_path: Path
) -> None:
    # The copy embeds the tokenizer, which the weights' fingerprint does not see (engines.base.folder_files_hash).
    ct2 = dataclasses.replace(genguard_engine("ctranslate2"), cache_dir=tmp_path / "cache")
    folder = tmp_path / "model"
    shutil.copytree(saved["gpt2"], folder)
    first = ct2.convert(folder)
    assert ct2.convert(folder) == first
    config = folder / "tokenizer_config.json"
    settings = json.loads(config.read_text())
    settings["chat_template"] = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    config.write_text(json.dumps(settings))
    assert ct2.convert(folder) != first


def test_a_missing_engine_names_its_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # import ctranslate2 now raises ImportError
    with pytest.raises(EngineUnavailable) as exc:
        engine("ctranslate2")
    # genguard is not on PyPI: the extra from the clone this genguard was installed from (the test run's), or the
    # extra's packages by themselves
    message = str(exc.value)
    assert f'pip install "{ROOT}[ctranslate2]" (the clone genguard was installed from' in message
    assert 'pip install "ctranslate2>=' in message
    assert not installs_by_name(message), message


def test_an_unknown_engine_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown engine 'vllm'; choose one of ctranslate2, llama_cpp, onnxruntime"):
        engine("vllm")


def test_a_folder_without_a_saved_model_is_named(genguard_engine: Any, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=f"{tmp_path} holds no config.json.*save_pretrained"):
        genguard_engine("ctranslate2").record(tmp_path, reference=reference("gpt2", "greedy"))


def test_a_converted_folder_of_another_engine_is_named(
    genguard_engine: Any, saved: dict[str, Path], tmp_path: Path
) -> None:
    with pytest.raises(FileNotFoundError, match="not a CTranslate2 model"):
        genguard_engine("ctranslate2").record(saved["gpt2"], reference=reference("gpt2", "greedy"), converted=tmp_path)


def test_importing_the_engines_imports_no_engine_and_no_torch() -> None:
    code = (
        "import sys, pytest_genguard.engines; "
        "print(sorted(m for m in ('torch', 'transformers', 'ctranslate2', 'onnxruntime', 'onnx') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
