"""CTranslate2 (``pip install "/path/to/pytest-genguard[ctranslate2]"``, from a clone): converted with its own
`TransformersConverter`, run in float32 on the CPU, scored with `Generator.forward_batch()` (the raw logits of whole
sequences in one call)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ctranslate2
import numpy

from pytest_genguard.engines.base import Backend, Logits

__all__ = ["backend", "convert", "load"]


def convert(model_dir: Path, out: Path) -> None:
    """`ct2-transformers-converter --model <model_dir> --quantization float32`, into `out` (model.bin,
    config.json, vocabulary.json)."""
    converter = ctranslate2.converters.TransformersConverter(str(model_dir))
    try:
        converter.convert(str(out), quantization="float32", force=True)
    except ValueError as exc:  # e.g. "Vocabulary has size 1": it reads the vocabulary from the saved tokenizer
        raise ValueError(
            f"genguard engines: CTranslate2 could not convert {model_dir} ({exc}); its converter needs the tokenizer "
            "saved in the same folder: tokenizer.save_pretrained(folder)"
        ) from exc


def load(converted: Path) -> Logits:
    """A float32 CPU `Generator` on `converted`, as a function from id sequences to their raw logits."""
    if not (converted / "model.bin").is_file():
        raise FileNotFoundError(
            f"genguard engines: {converted} is not a CTranslate2 model (no model.bin); convert with "
            "ct2-transformers-converter, or leave converted= unset and genguard converts the saved model"
        )
    generator = ctranslate2.Generator(str(converted), device="cpu", compute_type="float32", intra_threads=1)

    def logits(sequences: Sequence[Sequence[int]]) -> list[numpy.ndarray[Any, Any]]:
        if not sequences:
            return []
        out = numpy.asarray(generator.forward_batch([list(s) for s in sequences]))
        return [out[b, : len(s)] for b, s in enumerate(sequences)]

    return logits


def backend() -> Backend:
    """CTranslate2 as genguard runs it."""
    return Backend("ctranslate2", str(ctranslate2.__version__), "float32", convert, load)
