"""Fixtures of the engine tests: tiny models saved with `save_pretrained`."""

from pathlib import Path

import pytest

from pytest_genguard.hf.tiny import tiny_model, tiny_tokenizer


@pytest.fixture(scope="session")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """arch -> a folder holding the untrained tiny model and the shipped tokenizer, as save_pretrained writes them."""
    folders = {}
    for arch in ("gpt2", "llama"):
        folder = tmp_path_factory.mktemp(f"saved-{arch}")
        tiny_model(arch).save_pretrained(folder)
        tiny_tokenizer().save_pretrained(folder)
        folders[arch] = folder
    return folders
