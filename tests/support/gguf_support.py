"""The real chat model's GGUF tests' helpers (and the GGUF benchmarks'): their prompts, bug copies of a GGUF made
with gguf-py's own metadata scripts and its reader, and the float64 log-softmax the exact KLD is taken with."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

PROMPTS: list[Any] = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [
        {"role": "system", "content": "You are a concise assistant."},
        {"role": "user", "content": "What is 3333+777? Answer with the number."},
    ],
    "Café déjà vu — 123 😊 and the digits 1234567890:",
]
"""Two conversations (one with a system message) and a text of digits, accents, a dash and an emoji: the prompts of
tests/engines and of benchmarks/gguf_table.py, gguf_presets.py and llama_server_table.py."""


def log_softmax(x: Any) -> Any:
    """The float64 log-softmax of a numpy array of logits over its last axis (the exact KLD's)."""
    import numpy

    x = x.astype(numpy.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - numpy.log(numpy.exp(x - m).sum(axis=-1, keepdims=True))


def edited(source: Path, tmp_path: Path, script: str, *args: str) -> Path:
    """A copy of `source` edited by gguf-py's script `script` (in place for gguf_set_metadata, else to a new file)."""
    from pytest_genguard.engines.llama_cpp import metadata_script

    out = tmp_path / f"{source.stem}-{script}.gguf"
    if script == "gguf_set_metadata":
        shutil.copyfile(source, out)
        command = [sys.executable, str(metadata_script(script)), str(out), *args, "--force"]
    else:
        command = [sys.executable, str(metadata_script(script)), str(source), str(out), *args, "--force"]
    subprocess.run(command, check=True, capture_output=True)
    return out


def with_keys(source: Path, out: Path, keys: dict[str, tuple[Any, Any]]) -> Path:
    """A copy of `source` at `out` with metadata `keys` added or replaced (key -> (gguf.GGUFValueType, value)), written
    by gguf_new_metadata.py's own copy_with_new_metadata (its command line cannot add arbitrary keys)."""
    import gguf

    from pytest_genguard.engines.llama_cpp import metadata_script

    spec = importlib.util.spec_from_file_location("gguf_new_metadata", metadata_script("gguf_new_metadata"))
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    reader = gguf.GGUFReader(str(source))
    arch = str(reader.get_field("general.architecture").contents())  # type: ignore[union-attr]
    writer = gguf.GGUFWriter(str(out), arch=arch, endianess=reader.endianess)
    alignment = reader.get_field("general.alignment")
    if alignment is not None:
        writer.data_alignment = int(alignment.contents())
    details = {key: script.MetadataDetails(kind, value) for key, (kind, value) in keys.items()}
    script.copy_with_new_metadata(reader, writer, details, [])
    return out


def scaled_tensor(source: Path, out: Path, name: str, factor: float) -> Path:
    """A copy of `source` at `out` whose float32 tensor `name` (a norm weight: quantized files keep them F32) is
    multiplied by `factor`, written in place through gguf-py's reader."""
    import gguf
    import numpy

    shutil.copyfile(source, out)
    reader = gguf.GGUFReader(str(out), "r+")
    (tensor,) = [t for t in reader.tensors if t.name == name]
    if tensor.tensor_type != gguf.GGMLQuantizationType.F32:
        raise ValueError(f"{name} is {tensor.tensor_type.name} in {source}, not F32")
    tensor.data[...] = (tensor.data * numpy.float32(factor)).astype(numpy.float32)
    reader.data.flush()
    del reader
    return out


def judge_on(path: Path, hf: tuple[Any, Any], model_dir: Path | None, genguard_engine: Any) -> Any:
    """A check-gguf judge of `path` (llama.cpp's default f16 KV cache) on a session's Hugging Face side."""
    from pytest_genguard.engines.gguf_check import GGUFJudge
    from pytest_genguard.engines.llama_cpp import file_type

    model, tokenizer = hf
    return GGUFJudge(path, "f16", file_type(path), model, tokenizer, genguard_engine("llama_cpp"), model_dir)
