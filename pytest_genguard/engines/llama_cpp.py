"""llama.cpp through llama-cpp-python (``pip install "/path/to/pytest-genguard[llama_cpp]"``, from a clone): the GGUF
file that llama.cpp, Ollama and LM Studio users run, teacher forced in process with
``Llama(model_path, logits_all=True)``: one ``eval(ids)`` per prompt path, every position's logits from ``scores``;
the long probe's 2,048 positions are decoded a chunk at a time instead (`_Session.chunks`: one chunk's rows held).

A `save_pretrained` folder is converted with llama.cpp's own ``convert_hf_to_gguf.py`` (``--outtype`` f32, bf16 or
q8_0), vendored in llama-cpp-python's source distribution, and for the k-quants and Q4_1 (q6_k, q5_k_m, q4_k_m,
q4_1) to F32 first, then quantized by llama.cpp's own quantizer (``llama-quantize``'s ``llama_model_quantize``, in
llama-cpp-python's library): PyPI ships llama-cpp-python as source only, so
``.ci/llama-cpp-wheel`` builds it once and keeps the unpacked source beside the wheel, where `source_dir()` finds
it. A GGUF made elsewhere (a quantized file you ship) is judged as given: ``record(folder, converted=file)``.

llama.cpp stores its KV cache in float16 by default: a precision change of its own (up to 5e-3 in a logprob on an
F32 file), so the cache type is an option (``kv_cache="f32"`` holds the float32 rule) and part of the trace's
environment, with the GGUF's file type.
"""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import gguf
import llama_cpp
import numpy

from pytest_genguard.core.jsontext import JSONScalar
from pytest_genguard.engines.base import Backend, Logits
from pytest_genguard.engines.gguf_metadata import read_metadata
from pytest_genguard.hf.kv_cache_copies import CACHE_TYPES

__all__ = [
    "GGUF_FILE",
    "KV_CACHES",
    "OUTTYPES",
    "QUANTIZED",
    "backend",
    "build_folder",
    "build_identity",
    "convert",
    "file_type",
    "gguf_file",
    "load",
    "metadata_script",
    "quantize",
    "source_dir",
]

GGUF_FILE = "model.gguf"
"""The file a conversion writes into its cache folder."""
_CONVERTER = ("f32", "bf16", "q8_0")  # convert_hf_to_gguf.py --outtype makes these itself
QUANTIZED = {
    "q6_k": llama_cpp.LLAMA_FTYPE_MOSTLY_Q6_K,
    "q5_k_m": llama_cpp.LLAMA_FTYPE_MOSTLY_Q5_K_M,
    "q4_k_m": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M,
    "q4_1": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_1,
}
"""The file types made by llama.cpp's quantizer from the converter's F32 file (``llama-quantize``'s ftype)."""
OUTTYPES = (*_CONVERTER, *QUANTIZED)
"""Every GGUF file type genguard makes from a `save_pretrained` folder: the converter's, then the quantizer's."""
KV_CACHES = {
    "f16": llama_cpp.GGML_TYPE_F16,
    "f32": llama_cpp.GGML_TYPE_F32,
    "bf16": int(gguf.GGMLQuantizationType.BF16),  # llama-cpp-python names no GGML_TYPE_BF16
    "q8_0": llama_cpp.GGML_TYPE_Q8_0,
    "q4_0": llama_cpp.GGML_TYPE_Q4_0,
}
"""The KV cache types (``type_k`` and ``type_v``); f16 is llama.cpp's default. A quantized cache runs with flash
attention (llama.cpp refuses a quantized value cache without it: `hf.kv_cache_copies.CACHE_TYPES`)."""
SOURCE_ENV = "GENGUARD_LLAMA_SOURCE"
HOME_ENV = "GENGUARD_LLAMA_HOME"
RECIPE = 3  # .ci/llama-cpp-wheel's recipe number: the folder it keeps the wheel and the source in
_BUILD = ".ci/llama-cpp-wheel"


def source_dir() -> Path:
    """llama.cpp's source as llama-cpp-python vendors it (``vendor/llama.cpp``: the converter, gguf-py's scripts):
    ``$GENGUARD_LLAMA_SOURCE`` (the unpacked sdist, or its ``vendor/llama.cpp``), else the ``sdist`` folder that
    ``.ci/llama-cpp-wheel`` keeps under ``${GENGUARD_LLAMA_HOME:-~/.cache/genguard}``."""
    env = os.environ.get(SOURCE_ENV)
    base = Path(env).expanduser() if env else build_folder() / "sdist"
    for candidate in (base / "vendor" / "llama.cpp", base):
        if (candidate / "convert_hf_to_gguf.py").is_file():
            return candidate
    raise FileNotFoundError(
        f"genguard engine 'llama_cpp': no llama.cpp source with convert_hf_to_gguf.py at {base} (needed to convert a "
        f"save_pretrained folder to GGUF); build it with {_BUILD} (it keeps the unpacked llama-cpp-python "
        f"{llama_cpp.__version__} source there), or set {SOURCE_ENV} to an unpacked llama-cpp-python sdist"
    )


def metadata_script(name: str) -> Path:
    """gguf-py's script `name` (``gguf_set_metadata``, ``gguf_new_metadata``, ...) in `source_dir()`."""
    path = source_dir() / "gguf-py" / "gguf" / "scripts" / f"{name}.py"
    if not path.is_file():
        raise FileNotFoundError(f"genguard engine 'llama_cpp': {path} does not exist (gguf-py has no script {name!r})")
    return path


def _check_outtype(outtype: str) -> None:
    if outtype not in OUTTYPES:
        raise ValueError(f"genguard engine 'llama_cpp': outtype={outtype!r}; choose one of {', '.join(OUTTYPES)}")


def convert(model_dir: Path, out: Path, outtype: str = "f32") -> None:
    """`out`/model.gguf of `outtype`: ``convert_hf_to_gguf.py <model_dir> --outtype <outtype>``, run by this Python
    (it needs torch, transformers and sentencepiece, and uses the gguf-py vendored beside it); for a `QUANTIZED`
    type, the converter's F32 file quantized by `quantize()` (the F32 file is removed after)."""
    _check_outtype(outtype)
    target = out / (f"f32-{GGUF_FILE}" if outtype in QUANTIZED else GGUF_FILE)
    script = source_dir() / "convert_hf_to_gguf.py"
    command = [sys.executable, str(script), str(model_dir), "--outfile", str(target)]
    command += ["--outtype", "f32" if outtype in QUANTIZED else outtype]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0 or not target.is_file():
        tail = "\n".join(result.stderr.strip().splitlines()[-6:])
        raise RuntimeError(
            f"genguard engine 'llama_cpp': convert_hf_to_gguf.py could not convert {model_dir} "
            f"(exit {result.returncode}):\n{tail}"
        )
    if outtype in QUANTIZED:
        quantize(target, out / GGUF_FILE, outtype)
        target.unlink()


_QUANTIZE = """
import ctypes, sys
import llama_cpp
params = llama_cpp.llama_model_quantize_default_params()
params.ftype = int(sys.argv[3])
params.nthread = 1
sys.exit(llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), ctypes.byref(params)))
"""


def quantize(source: Path, out_file: Path, outtype: str) -> None:
    """`source` (an F32 or F16 GGUF) quantized to `outtype` (one of `QUANTIZED`) at `out_file` by llama.cpp's own
    quantizer with ``llama-quantize``'s defaults (no importance matrix), one thread; run in a child process, since the
    library prints its progress to the process's stderr and aborts on some bad input."""
    if outtype not in QUANTIZED:
        raise ValueError(
            f"genguard engine 'llama_cpp': quantize() makes {', '.join(QUANTIZED)}, not {outtype!r} "
            f"({', '.join(_CONVERTER)} come from convert_hf_to_gguf.py: use convert())"
        )
    command = [sys.executable, "-c", _QUANTIZE, str(source), str(out_file), str(QUANTIZED[outtype])]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0 or not out_file.is_file():
        tail = "\n".join(result.stderr.strip().splitlines()[-6:])
        raise RuntimeError(
            f"genguard engine 'llama_cpp': llama_model_quantize could not quantize {source} to {outtype} "
            f"(exit {result.returncode}):\n{tail}"
        )


def gguf_file(converted: Path) -> Path:
    """The GGUF file `converted` names: the file itself, or a conversion folder's ``model.gguf``."""
    path = converted / GGUF_FILE if converted.is_dir() else converted
    if not path.is_file():
        raise FileNotFoundError(
            f"genguard engines: {converted} is not a GGUF file (and holds no {GGUF_FILE}); pass the .gguf file, or "
            "leave converted= unset and genguard converts the saved model with convert_hf_to_gguf.py"
        )
    with path.open("rb") as f:
        if f.read(4) != b"GGUF":
            raise ValueError(f"genguard engines: {path} is not a GGUF file (it does not start with b'GGUF')")
    return path


def file_type(path: Path) -> str:
    """The GGUF's ``general.file_type`` by llama.cpp's name: F32, BF16, Q8_0, Q4_1, Q4_K_M, ..."""
    value = read_metadata(path).file_type
    if value is None:
        return "unknown (no general.file_type)"
    try:
        name = gguf.LlamaFileType(value).name
    except ValueError:
        return f"unknown ({value})"
    return name.removeprefix("MOSTLY_").removeprefix("ALL_")


KEPT_CONTEXT = 512
"""The longest context a session keeps open between calls (snapshot paths); a longer one is closed once read."""


class _Session:
    """A llama.cpp context on one GGUF, grown when a longer sequence comes (``logits_all`` keeps ``n_ctx`` rows of
    vocabulary-wide logits, so the context is no larger than the longest path)."""

    def __init__(self, path: Path, kv_cache: str) -> None:
        self.path = path
        self.kv_type = KV_CACHES[kv_cache]
        self.flash_attention = kv_cache in CACHE_TYPES and CACHE_TYPES[kv_cache].flash_attention
        self.llm: Any = None
        self.n_ctx = 0

    def _open(self, n_ctx: int, n_batch: int, logits_all: bool) -> Any:
        return llama_cpp.Llama(
            model_path=str(self.path),
            n_ctx=n_ctx,
            n_batch=n_batch,
            n_ubatch=n_batch,
            logits_all=logits_all,
            type_k=self.kv_type,
            type_v=self.kv_type,
            flash_attn=self.flash_attention,
            n_threads=1,
            n_threads_batch=1,
            verbose=False,
        )

    def _context(self, length: int) -> Any:
        if self.llm is None or length > self.n_ctx:
            self.close()
            self.n_ctx = _padded(length)
            self.llm = self._open(self.n_ctx, self.n_ctx, logits_all=True)
        return self.llm

    def close(self) -> None:
        if self.llm is not None:
            self.llm.close()
        self.llm, self.n_ctx = None, 0

    def __call__(self, sequences: Sequence[Sequence[int]]) -> list[numpy.ndarray[Any, Any]]:
        return self.logits(sequences)

    def chunks(self, ids: Sequence[int], size: int) -> Iterator[numpy.ndarray[Any, Any]]:
        """`ids`' logits `size` positions at a time (`engines.base.StreamedLogits`), from a context of their own whose
        output buffer holds one chunk's rows: at 2,048 positions of Gemma 3's 262,144-token vocabulary the one-pass
        context held 2 GB twice (llama.cpp's buffer and llama-cpp-python's ``scores``), this one 268 MB. The same
        logits bit for bit as the one pass (measured on SmolLM2's and Gemma 3's GGUFs), and 23% less CPU on Gemma's.
        The decode is llama-cpp-python's ``eval`` with every position's logits kept, through its public C API."""
        self.close()  # one context at a time
        llm = self._open(_padded(len(ids)), size, logits_all=False)  # `scores`: `size` rows, never written
        batch = llama_cpp.llama_batch_init(size, 0, 1)
        try:
            vocab = llm.n_vocab()
            for start in range(0, len(ids), size):
                part = ids[start : start + size]
                batch.n_tokens = len(part)
                for i, token in enumerate(part):
                    batch.token[i] = token
                    batch.pos[i] = start + i
                    batch.seq_id[i][0] = 0
                    batch.n_seq_id[i] = 1
                    batch.logits[i] = True
                code = llama_cpp.llama_decode(llm.ctx, batch)
                if code != 0:
                    raise RuntimeError(f"genguard engines: llama_decode returned {code} on {self.path}")
                rows = numpy.ctypeslib.as_array(llama_cpp.llama_get_logits(llm.ctx), shape=(len(part), vocab))
                yield rows.copy()  # the next decode overwrites llama.cpp's buffer
        finally:
            llama_cpp.llama_batch_free(batch)
            llm.close()

    def logits(self, sequences: Sequence[Sequence[int]]) -> list[numpy.ndarray[Any, Any]]:
        out = []
        for sequence in sequences:
            llm = self._context(len(sequence))
            llm.reset()
            llm.eval(list(sequence))
            rows = llm.scores[: len(sequence)]
            if self.n_ctx <= KEPT_CONTEXT:
                out.append(numpy.array(rows, dtype=numpy.float32))  # a copy: the next sequence overwrites `scores`
                continue
            # A long context holds its logits twice, llama.cpp's output buffer and llama-cpp-python's `scores`: its
            # rows are handed over without a third copy and the context closed, so nothing writes `scores` again and
            # llama.cpp's buffer is freed at once. (The long probe does not come here: `chunks`.)
            out.append(rows)
            self.close()
        return out


def _padded(length: int) -> int:
    """A context's size for `length` positions: a multiple of 256."""
    return max(256, -(-length // 256) * 256)


def load(converted: Path, kv_cache: str = "f16") -> Logits:
    """A llama.cpp context on `converted` (a GGUF file, or a conversion folder), one thread, as a function from id
    sequences to their raw logits; the KV cache in `kv_cache` (`KV_CACHES`)."""
    return _Session(gguf_file(converted), kv_cache)


def backend(outtype: str = "f32", kv_cache: str = "f16") -> Backend:
    """llama.cpp as genguard runs it: conversions to `outtype`, a KV cache of `kv_cache`."""
    _check_outtype(outtype)
    if kv_cache not in KV_CACHES:
        raise ValueError(f"genguard engine 'llama_cpp': kv_cache={kv_cache!r}; choose one of {', '.join(KV_CACHES)}")

    def describe(converted: Path) -> Mapping[str, JSONScalar]:
        path = gguf_file(converted)
        return {"gguf_file_type": file_type(path), "kv_cache": kv_cache, "gguf": path.name}

    return Backend(
        "llama_cpp",
        str(llama_cpp.__version__),
        "float32",
        lambda model_dir, out: convert(model_dir, out, outtype),
        lambda converted: load(converted, kv_cache),
        variant=outtype,
        describe=describe,
    )


@functools.cache
def build_identity() -> dict[str, str]:
    """What decides llama.cpp's arithmetic in this process: llama-cpp-python's version, the CPU features its ggml was
    built with, and the sha256 of its shared libraries (the same version built with other flags is another build).
    Part of the key a file's stored long probe is found by (`hf.probe_store`)."""
    folder = Path(llama_cpp.__file__).parent
    digest = hashlib.sha256()
    for library in sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in {".so", ".dylib", ".dll"}):
        digest.update(library.relative_to(folder).as_posix().encode())
        digest.update(hashlib.sha256(library.read_bytes()).digest())
    return {
        "llama_cpp": str(llama_cpp.__version__),
        "system": llama_cpp.llama_print_system_info().decode(errors="replace").strip(),
        "libraries": digest.hexdigest(),
    }


def build_folder() -> Path:
    """The folder ``.ci/llama-cpp-wheel`` keeps this llama-cpp-python's build in (the wheel, the unpacked source in
    ``sdist/``, llama-server and its libraries in ``server/``): under ``${GENGUARD_LLAMA_HOME:-~/.cache/genguard}``,
    keyed by the version, the Python and the recipe."""
    home = Path(os.environ.get(HOME_ENV) or Path.home() / ".cache" / "genguard").expanduser()
    tag = f"py{sys.version_info[0]}.{sys.version_info[1]}"
    return home / f"llama-cpp-python-{llama_cpp.__version__}-{tag}-recipe{RECIPE}"
