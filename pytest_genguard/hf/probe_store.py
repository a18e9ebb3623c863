"""The long probe's steps of a candidate that is a file (a GGUF), stored in genguard's cache: a team's CI judges the
same shipped file on every run (``check-gguf --baseline shipped.gguf``, ``--genguard-gguf``), and each read is an
engine pass over 2,048 positions plus the float64 KLD over the full vocabulary at each (SmolLM2-135M-Instruct's
Q4_K_M: 57 s against 2 s without the probe, benchmarks/long_probe.py). A later run reads the steps (about 1 MB).

An entry's key is everything its figures depend on: the candidate as its caller identifies it (a GGUF: its bytes'
sha256, the KV cache, llama.cpp's libraries), the reference model's weights and config, the probe's ids, the
environment a trace records (torch, transformers, the CPU kernel set, threads: the reference side's rounding), and
the source of the genguard modules that compute the steps (`code_hash`): a change to that code is a new key, never a
stale entry. Written like every cache entry (`hf.cache.fetch`: a temporary folder renamed into place, a lock per key
so xdist workers read a file's probe once); a folder that cannot be written is warned about, and the steps computed
all the same.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_genguard.core.errors import CacheFolderError, GenguardCacheWarning
from pytest_genguard.core.fidelity import StepFidelity
from pytest_genguard.hf.cache import CacheCorrupt, cache_key, default_cache_dir, fetch

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = [
    "STEPS_FILE",
    "STEPS_MODULES",
    "code_hash",
    "steps_from_json",
    "steps_to_json",
    "stored_steps",
    "stored_steps_key",
]

STEPS_FILE = "steps.json"
STEPS_MODULES = ("pytest_genguard.hf.long_probe", "pytest_genguard.hf.full_vocabulary", "pytest_genguard.core.fidelity")
"""The modules whose code computes a probe's steps from both sides' logits (their source is part of every key)."""


def code_hash(modules: Sequence[str]) -> str:
    """sha256 of the source files of `modules` (dotted names), in order."""
    digest = hashlib.sha256()
    for name in modules:
        source = importlib.import_module(name).__file__
        if source is None:
            raise ValueError(f"{name} has no source file to hash")
        digest.update(name.encode())
        digest.update(Path(source).read_bytes())
    return digest.hexdigest()


def stored_steps_key(model: PreTrainedModel, ids: Sequence[int], candidate: Mapping[str, Any]) -> str:
    """The cache key of a candidate's probe steps against `model` (see the module's docstring)."""
    from pytest_genguard.hf.environment import environment
    from pytest_genguard.hf.fingerprint import config_hash
    from pytest_genguard.hf.weights_hash import weights_hash

    return cache_key(
        {
            "what": "long-probe steps",
            "candidate": dict(candidate),
            "weights": weights_hash(model),
            "config": config_hash(model),
            "ids": hashlib.sha256(json.dumps(list(ids)).encode()).hexdigest(),
            "code": code_hash(STEPS_MODULES),
            "environment": environment(model),
        }
    )


def stored_steps(
    model: PreTrainedModel,
    ids: Sequence[int],
    candidate: Mapping[str, Any],
    read: Callable[[], tuple[StepFidelity, ...]],
) -> tuple[StepFidelity, ...]:
    """`read()`'s steps for the candidate identified by `candidate`, from genguard's cache (``long-probe/``) when
    stored there, else read and stored."""

    def build(folder: Path) -> tuple[tuple[StepFidelity, ...], dict[str, Any]]:
        steps = read()
        (folder / STEPS_FILE).write_text(steps_to_json(steps), encoding="utf-8")
        return steps, {"candidate": dict(candidate), "positions": len(steps)}

    def load(entry: Path, manifest: dict[str, Any]) -> tuple[StepFidelity, ...]:
        steps = steps_from_json((entry / STEPS_FILE).read_text(encoding="utf-8"))
        if len(steps) != manifest.get("positions"):
            raise CacheCorrupt(f"{STEPS_FILE} holds {len(steps)} steps, its manifest {manifest.get('positions')}")
        return steps

    try:
        key = stored_steps_key(model, ids, candidate)
        return fetch(default_cache_dir() / "long-probe", key, build=build, load=load).value
    except CacheFolderError as exc:
        warnings.warn(GenguardCacheWarning(f"the long probe's steps are not stored: {exc}"), stacklevel=2)
        return read()


_FIELDS = tuple(field.name for field in dataclasses.fields(StepFidelity))


def steps_to_json(steps: Sequence[StepFidelity]) -> str:
    """Steps as JSON rows, a list of field values each (floats round-trip exactly; an infinite KLD as Infinity)."""
    rows = [[getattr(step, name) for name in _FIELDS] for step in steps]
    return json.dumps({"fields": list(_FIELDS), "rows": rows}, separators=(",", ":"))


def steps_from_json(text: str) -> tuple[StepFidelity, ...]:
    """`steps_to_json`'s steps back; `CacheCorrupt` when the text is not that."""
    try:
        data = json.loads(text)
        if data["fields"] != list(_FIELDS):
            raise CacheCorrupt(f"{STEPS_FILE} names the fields {data['fields']}, not {list(_FIELDS)}")
        steps = []
        for row in data["rows"]:
            values = dict(zip(_FIELDS, row, strict=True))
            for name in ("reference_top", "candidate_top"):
                values[name] = tuple((int(i), float(lp)) for i, lp in values[name])
            steps.append(StepFidelity(**values))
    except (ValueError, KeyError, TypeError) as exc:
        raise CacheCorrupt(f"{STEPS_FILE} is not a probe's steps ({type(exc).__name__}: {exc})") from None
    return tuple(steps)
