"""Gemma 3 270M's tokenizer is one tokenizer on every supported transformers. `gemma3_folder()` builds it with
`tokenizers` from the GGUF's vocabulary and token types (SentencePiece BPE with byte fallback; the merges, which the
GGUF does not list, recovered from the vocabulary in file order). transformers 4.57's own GGUF converter reads the
same vocabulary as a Unigram model ("Hello world" is 4 tokens there, 2 here); 5.x's gives exactly the tokenizer built
here (compared file to file when this was written, on 5.25 and 4.57). The expected ids are those its snapshots were
recorded with; `.ci/run` runs this file on 4.57 too. Needs the model (``pytest_genguard.hf.gemma3.INSTALL``; .ci/run
installs it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import real_model_support

import pytest_genguard as gg


@pytest.fixture(scope="module")
def folder() -> Path:
    return real_model_support.installed_or_skip(gg.gemma3_folder)


@pytest.fixture(scope="module")
def tokenizer(folder: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)


def test_its_special_tokens_are_the_models(tokenizer: Any) -> None:
    specials = (tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token, tokenizer.unk_token)
    assert specials == ("<bos>", "<eos>", "<pad>", "<unk>")
    assert (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id) == (2, 1, 0)
    assert tokenizer.chat_template is None  # a base model


def test_its_pipeline_is_sentencepiece_bpe_with_byte_fallback(folder: Path) -> None:
    saved = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    assert saved["normalizer"] == {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}
    flags = {key: value for key, value in saved["model"].items() if key not in ("vocab", "merges")}
    assert flags == {
        "type": "BPE",
        "dropout": None,
        "unk_token": "<unk>",
        "continuing_subword_prefix": None,
        "end_of_word_suffix": None,
        "fuse_unk": True,
        "byte_fallback": True,
        "ignore_merges": False,
    }
    assert [step["type"] for step in saved["decoder"]["decoders"]] == ["Replace", "ByteFallback", "Fuse"]
    assert (len(saved["model"]["vocab"]), len(saved["model"]["merges"])) == (262144, 514906)
    special = [token["content"] for token in saved["added_tokens"] if token["special"]]
    plain = [token["content"] for token in saved["added_tokens"] if not token["special"]]
    assert (len(special), len(plain)) == (6249, 135)
    assert special[:4] == ["<pad>", "<eos>", "<bos>", "<unk>"] and "<start_of_turn>" in special
    assert {"\n\n", "\t", "<table>"} <= set(plain) and not any(" " in token for token in plain)


@pytest.mark.parametrize(
    ("text", "ids"),
    [
        ("Hello world", [2, 9259, 1902]),
        (" Hello  world\n\n", [2, 26352, 138, 12392, 108]),  # two spaces: the ▁▁ token; a newline run: one token
        ("def fibonacci(n):", [2, 2063, 10779, 78113, 236769, 236749, 1473]),
        ("The history of the Roman Empire", [2, 818, 4083, 529, 506, 10995, 23436]),
        ("naïve café 日本語 🙂", [2, 1789, 238527, 560, 33443, 33375, 238582, 57235]),
        ("\x07bell", [2, 245, 11761]),  # byte fallback: <0x07>
        ("<table><tr>", [2, 168, 173]),  # user-defined tokens, matched whole
        ("<start_of_turn>user\nhi<end_of_turn>", [2, 105, 2364, 107, 2202, 106]),
    ],
)
def test_texts_encode_as_recorded_and_decode_back(tokenizer: Any, text: str, ids: list[int]) -> None:
    assert tokenizer(text)["input_ids"] == ids
    assert tokenizer.decode(ids, skip_special_tokens=True) == text.replace("<start_of_turn>", "").replace(
        "<end_of_turn>", ""
    )
