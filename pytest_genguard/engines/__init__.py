"""Serving engines judged by the snapshots of the model they serve: CTranslate2, llama.cpp and ONNX Runtime.

`engine("ctranslate2").record(model_dir, reference=trace)` converts a `save_pretrained` folder (cached by the weights'
fingerprint), teacher forces the reference trace's paths through the engine and returns a `GenerationTrace` that
compares with the Hugging Face snapshot like any other. Each engine is an extra (``pip install
"/path/to/pytest-genguard[ctranslate2]"``, from a clone) imported only when used: importing this package imports no
engine, and neither torch nor transformers.
"""

from __future__ import annotations

from pathlib import Path

from pytest_genguard.core.errors import EngineUnavailable
from pytest_genguard.engines.base import Backend, Engine, backend_for

__all__ = ["ENGINES", "Backend", "Engine", "EngineUnavailable", "engine"]

ENGINES = ("ctranslate2", "llama_cpp", "onnxruntime")
"""The engines genguard can judge, by the name `engine()` takes."""


def engine(name: str, *, cache_dir: Path | str | None = None, **options: str) -> Engine:
    """The engine `name` (one of `ENGINES`), converting into `cache_dir` (default: genguard's cache dir); `options`
    configure it (llama.cpp: ``outtype`` f32, bf16 or q8_0 from convert_hf_to_gguf.py, or q6_k, q5_k_m, q4_k_m or
    q4_1 from its F32 file by llama.cpp's quantizer; ``kv_cache`` f16 or f32).

    Raises `EngineUnavailable` (an ImportError whose message is the install command) when the engine's extra is not
    installed, and ValueError for an unknown name.
    """
    return Engine(backend_for(name, **options), None if cache_dir is None else Path(cache_dir))
