"""Pins survive git: a checkout with ``core.autocrlf=true`` (the Windows default) turns history.json's LF line endings
into CRLF, and the pin must still verify; a real change to the file must still fail. This repository keeps its pins
and snapshots byte for byte with ``.gitattributes``."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_genguard import PinError
from pytest_genguard.hf.pins import HISTORY_FILE, PIN_MANIFEST, read_pin

REPO = Path(__file__).resolve().parents[2]
PINS = REPO / "examples" / "__genguard_pins__"


def _git(*args: str, cwd: Path) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)
    return done.stdout


def _clone_with_autocrlf(tmp_path: Path) -> Path:
    """The examples' pin committed to a fresh repository (no .gitattributes), cloned with core.autocrlf=true."""
    if shutil.which("git") is None:
        pytest.fail("git is not installed: this test needs a real clone")
    origin = tmp_path / "origin"
    (folder,) = PINS.iterdir()
    shutil.copytree(folder, origin / "__genguard_pins__" / folder.name)
    _git("init", "-q", cwd=origin)
    _git("-c", "core.autocrlf=false", "add", ".", cwd=origin)
    _git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "pin", cwd=origin)
    _git("clone", "-q", "-c", "core.autocrlf=true", str(origin), "clone", cwd=tmp_path)
    return tmp_path / "clone" / "__genguard_pins__" / folder.name


def test_a_pin_checked_out_with_autocrlf_verifies(tmp_path: Path) -> None:
    clone = _clone_with_autocrlf(tmp_path)
    assert b"\r\n" in (clone / HISTORY_FILE).read_bytes()  # git did rewrite the line endings
    recipe = json.loads((clone / PIN_MANIFEST).read_text())["recipe"]
    manifest = read_pin(clone, recipe)
    assert manifest is not None and manifest["recipe"] == recipe


def test_a_changed_history_still_fails_after_an_autocrlf_checkout(tmp_path: Path) -> None:
    clone = _clone_with_autocrlf(tmp_path)
    history = clone / HISTORY_FILE
    history.write_bytes(history.read_bytes().replace(b'"step": 37', b'"step": 38', 1))
    recipe = json.loads((clone / PIN_MANIFEST).read_text())["recipe"]
    with pytest.raises(PinError, match=f"{HISTORY_FILE} does not match its sha256"):
        read_pin(clone, recipe)


def test_crlf_in_the_weights_is_not_forgiven(tmp_path: Path) -> None:
    """Only the text file is read with normalised line endings: the weights are bytes."""
    (folder,) = PINS.iterdir()
    copy = tmp_path / folder.name
    shutil.copytree(folder, copy)
    weights = copy / "model.safetensors"
    data = weights.read_bytes()
    assert b"\n" in data
    weights.write_bytes(data.replace(b"\n", b"\r\n"))
    recipe = json.loads((copy / PIN_MANIFEST).read_text())["recipe"]
    with pytest.raises(PinError, match=r"model\.safetensors does not match its sha256"):
        read_pin(copy, recipe)


@pytest.mark.parametrize(
    "path",
    [
        "examples/__genguard_pins__/gpt2-207d783a478e3b2f/history.json",
        "examples/__genguard_pins__/gpt2-207d783a478e3b2f/pin.json",
        "examples/__snapshots__/test_decoding/test_greedy_path.genguard",
    ],
)
def test_this_repository_keeps_pins_and_snapshots_byte_for_byte(path: str) -> None:
    if not (REPO / ".git").exists():
        pytest.fail(f"{REPO} is not a git checkout: .gitattributes cannot be checked")
    assert _git("check-attr", "text", "--", path, cwd=REPO).strip().endswith("text: unset")


def test_the_recipe_of_a_package_checked_out_with_crlf_is_the_recipe_of_the_pins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The recipe hashes the shipped tokenizer.json: with its line endings turned into CRLF by git (a source
    checkout with core.autocrlf=true), the committed pins must still be found."""
    from importlib import resources

    from pytest_genguard.hf import recipe as recipe_module

    shipped = resources.files("pytest_genguard").joinpath("data", "tokenizer.json").read_bytes()
    crlf = tmp_path / "data" / "tokenizer.json"
    crlf.parent.mkdir()
    crlf.write_bytes(shipped.replace(b"\n", b"\r\n"))
    assert crlf.read_bytes() != shipped
    spec = recipe_module.Recipe.of("gpt2")  # the shipped texts are read here, line by line
    monkeypatch.setattr(recipe_module.resources, "files", lambda package: tmp_path)
    (folder,) = PINS.iterdir()
    pinned = json.loads((folder / PIN_MANIFEST).read_text())["recipe"]
    assert recipe_module.recipe_hash(spec) == pinned
