"""Gemma 3 270M's GGUF is four pip packages' bytes concatenated: `gemma3_gguf()` keeps the assembled file only when
its sha256 is the shipped file's, and a missing or damaged part is refused with the command that fixes it. Needs the
model (``pytest_genguard.hf.gemma3.INSTALL``; .ci/run installs it)."""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path

import pytest
import real_model_support

import pytest_genguard as gg
from pytest_genguard.core.files import file_sha256
from pytest_genguard.hf import gemma3


@pytest.fixture(scope="module")
def shipped() -> Path:
    return real_model_support.installed_or_skip(gg.gemma3_gguf)


def test_the_assembled_file_is_the_shipped_gguf(shipped: Path) -> None:
    assert shipped.name == gemma3.GGUF_FILE
    assert file_sha256(shipped) == gemma3.GGUF_SHA256


def test_a_damaged_part_is_refused_and_nothing_is_kept(
    shipped: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    last = gemma3.PARTS[-1].replace("-", "_")
    real = Path(importlib.import_module(last).chunk_path())
    damaged = tmp_path / "parts" / real.name
    damaged.parent.mkdir()
    damaged.write_bytes(real.read_bytes()[: 1 << 20])  # a truncated download
    fake = types.ModuleType(last)
    fake.chunk_path = lambda: damaged  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, last, fake)
    with pytest.raises(gg.ModelUnavailable, match=f"not {gemma3.GGUF_SHA256}") as raised:
        gg.gemma3_gguf(tmp_path / "models")
    assert "--force-reinstall" in str(raised.value) and str(damaged) in str(raised.value)
    assert not list((tmp_path / "models").glob(f"*/{gemma3.GGUF_FILE}"))  # no entry, no half-built folder
    assert not list((tmp_path / "models").glob(".build-*"))


def test_a_missing_part_names_the_install_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, gemma3.PARTS[2].replace("-", "_"), None)  # import raises ModuleNotFoundError
    with pytest.raises(gg.ModelUnavailable, match=gemma3.PARTS[2]) as raised:
        gg.gemma3_folder(tmp_path)
    assert gemma3.INSTALL in str(raised.value)
    assert not any(tmp_path.iterdir())
