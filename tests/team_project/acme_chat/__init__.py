"""acme-chat: the team's chat model, loaded from the folder the team committed beside its package."""

from __future__ import annotations

from pathlib import Path
from typing import Any

MODEL_DIR = Path(__file__).resolve().parent.parent / "models" / "tiny-chat"


def load(folder: Path = MODEL_DIR) -> tuple[Any, Any]:
    """The model (float32, eval mode) and its tokenizer from a save_pretrained folder."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    return model, tokenizer
