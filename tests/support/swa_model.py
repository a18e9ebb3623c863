"""A tiny model with sliding-window layers for the long-context negative controls (and benchmarks/long_probe.py): Gemma
3's text architecture (5 sliding-window layers of window 16, then 1 global layer: rope base 1e4 and 1e6), SmolLM2's
tokenizer (llama.cpp's converter knows its pre-tokenizer), 6 layers of width 256 (the k-quants' block), saved with
`save_pretrained` so llama.cpp's own converter makes its GGUF.

Untrained weights give near-uniform logits (entropy 10.75 of 10.80 nats at initializer_range 0.02), where a bug
hardly moves a KLD; so the final norm's weight is set to 11 (Gemma's norm multiplies by 1 + weight: logits x12), which
leaves the attention, and so the positions, deciding the distribution (the embeddings are small beside the
post-normed attention and MLP outputs). Deterministic from seed 0; built once per folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

WINDOW = 16
FINAL_NORM = 11.0


def swa_config(tokenizer: Any) -> Any:
    """The config: Gemma 3 text, tiny, window 16, the query scale 1/sqrt(head_dim) as llama.cpp computes it."""
    from transformers import Gemma3TextConfig

    return Gemma3TextConfig(
        vocab_size=len(tokenizer),
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=6,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=64,
        query_pre_attn_scalar=64,  # llama.cpp scales queries by 1/sqrt(head_dim) (its 27B type aside)
        sliding_window=WINDOW,
        max_position_embeddings=4096,
        initializer_range=0.02,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def swa_model(tokenizer: Any) -> Any:
    """The model, float32, eval mode, seed 0."""
    import torch
    from transformers import Gemma3ForCausalLM

    torch.manual_seed(0)
    model = Gemma3ForCausalLM(swa_config(tokenizer)).eval()
    with torch.no_grad():
        model.model.norm.weight.fill_(FINAL_NORM)
    return model


def save_swa_model(folder: Path) -> Path:
    """The model and SmolLM2's tokenizer saved in `folder` (created)."""
    from transformers import AutoTokenizer

    from pytest_genguard.hf.smollm2 import smollm2_folder

    tokenizer = AutoTokenizer.from_pretrained(smollm2_folder())
    folder.mkdir(parents=True, exist_ok=True)
    swa_model(tokenizer).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
