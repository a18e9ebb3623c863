"""`gguf_transformers.gguf_config_and_tokenizer` on the real chat model's GGUF: transformers parses the file once per
state of it and of its folder, and every caller gets its own copies."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_genguard.core import file_states
from pytest_genguard.core.errors import GenguardError
from pytest_genguard.engines.gguf_transformers import gguf_config_and_tokenizer


@pytest.fixture
def gguf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the shipped Q4_1 file in a folder of its own (RACY_NS 0: the copy's change time is now)."""
    from pytest_genguard.hf.smollm2 import gguf_path

    try:
        source = gguf_path()
    except GenguardError as exc:  # the model package is missing: say how to install it
        pytest.skip(str(exc))
    monkeypatch.setattr(file_states, "RACY_NS", 0)
    return Path(shutil.copy2(source, tmp_path / source.name))


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How many times transformers' AutoConfig and AutoTokenizer were asked for a GGUF's config or tokenizer."""
    import transformers

    counts = {"config": 0, "tokenizer": 0}

    def counting(name: str, original: Callable[..., Any]) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            counts[name] += "gguf_file" in kwargs
            return original(*args, **kwargs)

        return staticmethod(wrapper)

    for name, auto in (("config", transformers.AutoConfig), ("tokenizer", transformers.AutoTokenizer)):
        monkeypatch.setattr(auto, "from_pretrained", counting(name, auto.from_pretrained))
    return counts


def test_the_file_is_read_once_each_caller_gets_copies_and_a_tokenizer_config_beside_it_is_read_again(
    gguf: Path, reads: dict[str, int]
) -> None:
    # Each read parses the whole file twice (about 6 s): one test, four parses. An edit of the file itself is
    # tests/engines/test_kept_files.py's (the same rule, without a real model's parse).
    config, tokenizer = gguf_config_and_tokenizer(gguf)
    assert reads == {"config": 1, "tokenizer": 1}
    vocab_size, ids = config.vocab_size, tokenizer("The capital of France is").input_ids
    config.vocab_size = 1  # a caller changes what it got
    tokenizer.add_tokens(["<genguard-added>"])
    again, tokenizer_again = gguf_config_and_tokenizer(gguf)
    assert reads == {"config": 1, "tokenizer": 1}  # not parsed again
    assert again is not config and again.vocab_size == vocab_size == 49152
    assert tokenizer_again is not tokenizer and len(tokenizer_again) == len(tokenizer) - 1
    assert tokenizer_again("The capital of France is").input_ids == ids

    time.sleep(0.01)  # past the file system clock's tick
    (gguf.parent / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "GPT2Tokenizer"}), "utf-8")
    _, beside = gguf_config_and_tokenizer(gguf)
    assert reads == {"config": 2, "tokenizer": 2}
    # transformers reads the class from it (so the key must cover it), and still the vocabulary from the GGUF
    assert type(beside).__name__.startswith("GPT2Tokenizer") and not type(tokenizer).__name__.startswith("GPT2")
    assert beside("The capital of France is").input_ids == ids
