"""The tiny llama the vLLM server tests serve (fixtures/vllm_tiny_llama) is the one tests/support/served_model.py
builds, bitwise, and has the shape vLLM's CPU attention accepts (head_dim 32)."""

from __future__ import annotations

import json

import served_model
import torch
from safetensors.torch import load_file


def test_the_pinned_model_is_the_one_the_builder_makes() -> None:
    saved = load_file(served_model.MODEL_DIR / "model.safetensors")
    built = served_model.build_model().state_dict()
    assert set(saved) <= set(built)
    for name, tensor in saved.items():
        assert torch.equal(tensor, built[name]), name


def test_the_pinned_model_has_head_dim_32_and_a_sharp_output_layer() -> None:
    config = json.loads((served_model.MODEL_DIR / "config.json").read_text(encoding="utf-8"))
    assert config["hidden_size"] // config["num_attention_heads"] == 32
    saved = load_file(served_model.MODEL_DIR / "model.safetensors")
    unsharpened = served_model.build_model().lm_head.weight / served_model.SHARPEN
    assert not torch.equal(saved["lm_head.weight"], unsharpened)  # the scale is in the pinned weights
