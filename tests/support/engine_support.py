"""What the engine tests share: the prompts, decoding modes and reference traces of the tiny models."""

from typing import Any

import torch

import pytest_genguard
from pytest_genguard.hf.tiny import tiny_model, tiny_tokenizer

PROMPTS = ["the quick", "once upon a time"]
MODES: dict[str, dict[str, Any]] = {
    "greedy": {},
    "sampled-top-k": {"do_sample": True, "seed": 3, "temperature": 0.8, "generation_top_k": 20},
}


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
