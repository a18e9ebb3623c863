"""A GGUF's own config and tokenizer as transformers reads them (``from_pretrained(folder, gguf_file=name)``): what
`genguard check-gguf` judges a file by without ``--model``. Each of the two reads parses the whole file with gguf-py's
reader (about 3 s each for SmolLM2-135M's Q4_1 on a quiet machine), and ``pytest --genguard-gguf`` and the tests open
the same few files again and again: so both are read once per state of the file and of its folder (`kept_files`;
transformers reads a ``tokenizer_config.json`` beside the file too). Every call returns copies (0.09 s for that
tokenizer): what one caller changes, the next does not see.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from pytest_genguard.engines.kept_files import KeptPerState

__all__ = ["KEPT_FILES", "gguf_config_and_tokenizer"]

KEPT_FILES = 4
"""How many files' config and tokenizer a process keeps (a tokenizer of a 49,152-token vocabulary: a few MB)."""

_KEPT: KeptPerState[tuple[Any, Any]] = KeptPerState(KEPT_FILES)


def gguf_config_and_tokenizer(gguf: Path) -> tuple[Any, Any]:
    """The GGUF's config and tokenizer as transformers reads them, as copies of what this process read first."""
    path = gguf.resolve()
    folder = path.parent
    beside = sorted(p for p in folder.iterdir() if p.suffix in (".json", ".jinja") and p.is_file())
    config, tokenizer = _KEPT.get(path, lambda: _read(path), also=(folder, *beside))
    return copy.deepcopy(config), copy.deepcopy(tokenizer)


def _read(path: Path) -> tuple[Any, Any]:
    from transformers import AutoConfig, AutoTokenizer

    folder, name = str(path.parent), path.name
    return AutoConfig.from_pretrained(folder, gguf_file=name), AutoTokenizer.from_pretrained(folder, gguf_file=name)
