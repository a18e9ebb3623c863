"""Fixtures of the engine tests: tiny models saved with `save_pretrained`; the real chat model (SmolLM2-135M-Instruct),
its float32 reference trace and llama.cpp's converter's F32 file of it (the llama.cpp tests)."""

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from gguf_support import PROMPTS, edited
from run_shared import made_once_in, once_per_run

from pytest_genguard import record
from pytest_genguard.core.errors import GenguardError
from pytest_genguard.hf.tiny import tiny_model, tiny_tokenizer


@pytest.fixture(scope="session")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """arch -> a folder holding the untrained tiny model and the shipped tokenizer, as save_pretrained writes them."""
    folders = {}
    for arch in ("gpt2", "llama"):
        folder = tmp_path_factory.mktemp(f"saved-{arch}")
        tiny_model(arch).save_pretrained(folder)
        tiny_tokenizer().save_pretrained(folder)
        folders[arch] = folder
    return folders


STEPS = 32


@pytest.fixture(scope="session")
def folder() -> Path:
    from pytest_genguard.hf.smollm2 import smollm2_folder

    try:
        return smollm2_folder()
    except GenguardError as exc:  # the model package is missing: say how to install it
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def hf(folder: Path) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(folder)


@pytest.fixture(scope="session")
def reference(hf: tuple[Any, Any], genguard_engine: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """transformers' float32 trace, with the model's own calibration (the budgets' scale: kv-f16 judges an F32 file run
    with llama.cpp's f16 KV cache, bf16 a BF16 file, int8 the quantized types' presets). Only the llama.cpp tests use
    it: without the extra they skip before it is computed. Made once per run (about 75 s), shared by the xdist
    workers through its JSON form (which keeps its float32 values and its calibration exactly)."""
    from pytest_genguard import GenerationTrace, calibrate

    genguard_engine("llama_cpp")
    model, tokenizer = hf

    def make() -> str:
        trace = record(model, tokenizer, PROMPTS, max_new_tokens=STEPS, top_k=5, do_sample=False)
        precisions = ("fp16", "bf16", "int8", "int4", "kv-f16")
        return str(calibrate(model, tokenizer, trace, precisions=precisions).to_json())

    return GenerationTrace.from_json(once_per_run(tmp_path_factory, "smollm2-gguf-reference.json", make))


@pytest.fixture(scope="session")
def f32_gguf(folder: Path, genguard_engine: Any) -> Path:
    """llama.cpp's converter's F32 file of the float32 folder (cached by the weights' fingerprint)."""
    return genguard_engine("llama_cpp", outtype="f32").convert(folder) / "model.gguf"


@pytest.fixture(scope="session")
def gguf_of(folder: Path, genguard_engine: Any) -> Any:
    """outtype -> llama.cpp's own file of the float32 folder (converter, then quantizer; cached by the weights)."""

    genguard_engine("llama_cpp")  # skips, naming the install command, without the extra

    def gguf_of(outtype: str) -> Path:
        return Path(genguard_engine("llama_cpp", outtype=outtype).convert(folder)) / "model.gguf"

    return gguf_of


@pytest.fixture(scope="session")
def llama_cpp_extra(genguard_engine: Any) -> None:
    """For a test that needs llama-cpp-python without recording through the engine: skipped, naming the install
    command, without the extra (CI runs every such test with it, in README's command)."""
    genguard_engine("llama_cpp")


@pytest.fixture(scope="session")
def edits(pytestconfig: pytest.Config) -> Callable[..., Path]:
    """(source, script, *args) -> `gguf_support.edited`'s copy of a GGUF, made once and shared by the tests and the
    xdist workers that ask for the same edit (each one a copy and a parse of the whole file by gguf-py: 540 MB for
    SmolLM2's F32, 25 s of CPU at Gemma 3's 262,144-token vocabulary). Kept in the run's genguard cache (pytest's cache
    dir, `genguard_cache_dir`), keyed by the source's path, size and modification time (a rebuilt source is another
    key), the edit and gguf-py's script: a second run reads it. A test reads it, never changes it."""
    from pytest_genguard.engines.llama_cpp import metadata_script
    from pytest_genguard.plugin.finetune_fixture import cache_dir_for

    root = cache_dir_for(pytestconfig) / "test-gguf-edits"

    def edit(source: Path, script: str, *args: str) -> Path:
        stat = source.stat()
        code = metadata_script(script)
        parts = [
            str(source),
            stat.st_size,
            stat.st_mtime_ns,
            script,
            *args,
            str(code),
            hashlib.sha256(code.read_bytes()).hexdigest(),
        ]
        key = hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]
        return made_once_in(root, f"gguf-edit-{key}", lambda folder: edited(source, folder, script, *args))

    return edit


# ---- Gemma 3 270M, the second real family: its float32 model and a calibrated snapshot of short prompts

GEMMA3_PROMPTS = ["The capital of France is", "def fibonacci(n):", "The history of the Roman Empire"]


@pytest.fixture(scope="session")
def gemma3_folder() -> Path:
    from pytest_genguard.hf.gemma3 import gemma3_folder

    try:
        return gemma3_folder()
    except GenguardError as exc:  # the model's packages are missing: say how to install them
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def gemma3_hf(gemma3_folder: Path) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(gemma3_folder, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(gemma3_folder)


@pytest.fixture(scope="session")
def gemma3_reference(gemma3_hf: tuple[Any, Any], genguard_engine: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Its float32 greedy trace (3 prompts x 16 tokens: its 262,144-token vocabulary makes each step heavy) with its
    int8 calibration, the gguf-* presets' scale; made once per run, shared by the xdist workers."""
    from pytest_genguard import GenerationTrace, calibrate

    genguard_engine("llama_cpp")
    model, tokenizer = gemma3_hf

    def make() -> str:
        trace = record(model, tokenizer, GEMMA3_PROMPTS, max_new_tokens=16, top_k=5, do_sample=False)
        return str(calibrate(model, tokenizer, trace, precisions=("int8",)).to_json())

    return GenerationTrace.from_json(once_per_run(tmp_path_factory, "gemma3-gguf-reference.json", make))
