"""Fixtures of the engine tests: tiny models saved with `save_pretrained`, and their reference traces."""

from pathlib import Path
from typing import Any

import pytest
import torch

import pytest_genguard
from pytest_genguard.hf.tiny import tiny_model, tiny_tokenizer

PROMPTS = ["the quick", "once upon a time"]
MODES: dict[str, dict[str, Any]] = {
    "greedy": {},
    "sampled-top-k": {"do_sample": True, "seed": 3, "temperature": 0.8, "generation_top_k": 20},
}


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


def reference(arch: str, mode: str) -> pytest_genguard.GenerationTrace:
    """What transformers generates with the tiny model of `arch`: 2 prompts, 24 tokens, top-5, in `mode`."""
    settings = dict(MODES[mode])
    config = None
    model = tiny_model(arch)
    if "generation_top_k" in settings:  # a sampling top-k goes in a generation config (record()'s top_k is the top-5)
        config = model.generation_config
        config.top_k = settings.pop("generation_top_k")
        settings["generation_config"] = config
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return pytest_genguard.record(model, tiny_tokenizer(), PROMPTS, max_new_tokens=24, top_k=5, **settings)
    finally:
        torch.set_num_threads(threads)
