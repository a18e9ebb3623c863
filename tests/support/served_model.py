"""The tiny llama the vLLM server tests serve, pinned in fixtures/vllm_tiny_llama (``python
tests/support/served_model.py`` rebuilds it; tests/serving/test_served_model_fixture.py checks it reproduces it).

vLLM's CPU attention refuses head_dim 16, so this llama is wider than `tiny_model`'s default: hidden 128, 4 heads
(head_dim 32). Its output layer is scaled up so the distributions are sharp (an untrained tiny model is near uniform,
where every greedy step is a near tie and a changed model could hide among them): the snapshots' steps have clear
margins, and a served config that differs shows as moved logprobs at the first step.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

MODEL_DIR = Path(__file__).resolve().parents[2] / "fixtures" / "vllm_tiny_llama"
OVERRIDES: dict[str, Any] = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "tie_word_embeddings": False,
}
SHARPEN = 24.0  # lm_head scale: the softmax of the scaled logits has top-1 margins of ~1 nat
PROMPTS = ("the quick brown fox", "a small model", "once upon a time", "numbers and letters")


def build_model(seed: int = 0) -> Any:
    """The served model, in float32, built from its config and seed (no hub)."""
    import torch

    from pytest_genguard.hf.tiny import tiny_model

    model = tiny_model("llama", seed, **OVERRIDES)
    with torch.no_grad():
        model.lm_head.weight.mul_(SHARPEN)
    return model


def save(folder: Path, seed: int = 0) -> None:
    """Write the model and the tiny tokenizer with save_pretrained into `folder`."""
    from pytest_genguard.hf.tiny import tiny_tokenizer

    build_model(seed).save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)


def other_model() -> tuple[Any, Any]:
    """Another model, with another tokenizer (trained on the fine-tuning sentences alone): its snapshot is stale
    against the served model, whose tokenizer gives the same prompt texts other ids."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    from pytest_genguard.hf.tiny import build_tokenizer_json, finetune_texts, tiny_model

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(build_tokenizer_json(finetune_texts())),
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
    )
    model = tiny_model("llama", 1, vocab_size=len(tokenizer), **OVERRIDES)
    return model, tokenizer


def snapshot(model: Any, tokenizer: Any, *, max_new_tokens: int = 12, top_k: int = 5) -> Any:
    """The transformers trace the server is judged against: `PROMPTS`, greedy."""
    from pytest_genguard import record

    return record(model, tokenizer, list(PROMPTS), max_new_tokens=max_new_tokens, top_k=top_k)


if __name__ == "__main__":
    save(Path(sys.argv[1]) if len(sys.argv) > 1 else MODEL_DIR)
