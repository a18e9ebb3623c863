"""The content-addressed cache of fine-tuned models: one directory per key, written atomically, locked per key.

Training a tiny model takes seconds; loading it takes milliseconds. An entry is a directory named by the sha256 of
everything that determines the result (see `cache_key`), holding the files a builder wrote and `manifest.json`,
written last, with each file's sha256. Entries are built in a temporary directory inside the cache directory and
renamed into place, so a killed run never leaves a half-written entry under a key; an entry that is corrupt anyway
(missing manifest, checksum mismatch, unreadable weights) is reported with a `GenguardCacheWarning` and rebuilt.
A `filelock.FileLock` per key makes concurrent pytest-xdist workers build an entry once: the others wait, then load.
Torch-free at import: `fetch` is generic, and the model-entry helpers at the end import torch-side modules inside.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pytest_genguard.core.errors import CacheFolderError, GenguardCacheWarning
from pytest_genguard.core.files import file_records, file_records_problem, write_manifest
from pytest_genguard.core.history import RecorderHistory, history_from_json, history_to_json
from pytest_genguard.hf.fingerprint import model_fingerprint

if TYPE_CHECKING:
    from transformers import PreTrainedModel


__all__ = [
    "CACHE_FORMAT",
    "HISTORY_FILE",
    "MANIFEST",
    "WEIGHTS_FILE",
    "CacheCorrupt",
    "Fetched",
    "cache_key",
    "default_cache_dir",
    "fetch",
    "key_lock",
    "load_model_entry",
    "save_model_entry",
    "verify_entry",
]

CACHE_FORMAT = 3
"""Bumped when the layout of an entry, or the trace format of the recorder history it stores, changes: part of
every fine-tuning key, so old entries are simply not found. (2: decoding settings normalized across versions;
3: the model fingerprint carries the architecture config.)"""

MANIFEST = "manifest.json"
LOCK_TIMEOUT_S = 1800.0
ENV_VAR = "GENGUARD_CACHE_DIR"

T = TypeVar("T")


class CacheCorrupt(Exception):
    """Raised by verification or a loader: the entry cannot be trusted; the message says why."""


def _folder_error(root: Path, exc: OSError) -> CacheFolderError:
    return CacheFolderError(
        f"genguard cache folder {root} cannot be written ({type(exc).__name__}: {exc}); point the cache at a folder "
        f"you can write: the ini option genguard_cache_dir, or the environment variable {ENV_VAR} (used outside "
        "pytest, and inside with -p no:cacheprovider)"
    )


def default_cache_dir() -> Path:
    """`$GENGUARD_CACHE_DIR`, else the user cache dir (e.g. ~/.cache/genguard): the cache outside pytest."""
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("genguard"))


def cache_key(parts: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of `parts` (sorted keys): equal inputs, equal key, on every machine."""
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str, ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def verify_entry(entry: Path, key: str) -> dict[str, Any]:
    """The entry's manifest, after checking it names `key` and every listed file has its recorded sha256."""
    manifest_path = entry / MANIFEST
    if not manifest_path.is_file():
        raise CacheCorrupt(f"no {MANIFEST} (an interrupted or foreign write)")
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CacheCorrupt(f"{MANIFEST} is unreadable ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("key") != key or manifest.get("format") != CACHE_FORMAT:
        raise CacheCorrupt(f"{MANIFEST} does not describe key {key[:16]}… in cache format {CACHE_FORMAT}")
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        raise CacheCorrupt(f"{MANIFEST} lists no files")
    problem = file_records_problem(entry, files, MANIFEST)
    if problem is not None:
        raise CacheCorrupt(problem)
    return manifest


def _discard(entry: Path) -> None:
    """Move an entry aside, then delete it: the key's path is free at once even if deletion is slow or fails."""
    if not entry.exists():
        return
    trash = entry.with_name(f".trash-{entry.name[:16]}-{uuid.uuid4().hex[:8]}")
    os.replace(entry, trash)
    shutil.rmtree(trash, ignore_errors=True)


def _sweep_leftovers(root: Path, key: str) -> None:
    """Temp and trash dirs of this key left by killed runs (safe: we hold the key's lock)."""
    for pattern in (f".build-{key[:16]}-*", f".trash-{key[:16]}-*"):
        for leftover in root.glob(pattern):
            shutil.rmtree(leftover, ignore_errors=True)


@contextlib.contextmanager
def key_lock(root: Path, key: str) -> Iterator[None]:
    """The per-key inter-process lock (a plain file lock: released by the OS if its holder dies)."""
    from filelock import FileLock, Timeout

    lock_path = root / f"{key}.lock"
    lock = FileLock(str(lock_path), timeout=LOCK_TIMEOUT_S)
    try:
        lock.acquire()
    except Timeout:
        raise TimeoutError(
            f"genguard cache: waited {LOCK_TIMEOUT_S:.0f} s for {lock_path}, held by another process building the "
            "same model; if no such process is running, delete the lock file and re-run."
        ) from None
    except OSError as exc:  # a read-only folder: not a raw "OSError ... .lock"
        raise _folder_error(root, exc) from None
    try:
        yield
    finally:
        lock.release()


@dataclass(frozen=True)
class Fetched(Generic[T]):
    """What `fetch` returns: the value, whether it came from the cache, the entry path and its manifest."""

    value: T
    from_cache: bool
    path: Path
    manifest: dict[str, Any]


def fetch(
    root: Path,
    key: str,
    *,
    build: Callable[[Path], tuple[T, dict[str, Any]]],
    load: Callable[[Path, dict[str, Any]], T],
    force: Callable[[dict[str, Any]], bool] = lambda manifest: False,
) -> Fetched[T]:
    """Load the entry for `key` under `root`, or build it once (under the key's lock) and store it atomically.

    `build(tmpdir)` writes its files into `tmpdir` and returns the value and manifest fields (JSON-able); the
    manifest with every file's sha256 is written last. `load(entry, manifest)` raises `CacheCorrupt` (or anything)
    when the entry is unusable: it is then rebuilt with a `GenguardCacheWarning`. `force(manifest)` true means
    rebuild a valid entry too (`--genguard-rebuild`).
    """
    root = Path(root)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _folder_error(root, exc) from None
    entry = root / key
    with key_lock(root, key):
        _sweep_leftovers(root, key)
        if entry.exists():
            try:
                manifest = verify_entry(entry, key)
                if not force(manifest):
                    return Fetched(load(entry, manifest), True, entry, manifest)
            except Exception as exc:  # any failure to verify or load means: rebuild, and say why
                warnings.warn(
                    GenguardCacheWarning(
                        f"genguard cache entry {entry} is unusable ({type(exc).__name__}: {exc}); rebuilding it."
                    ),
                    stacklevel=2,
                )
        tmp = Path(tempfile.mkdtemp(prefix=f".build-{key[:16]}-", dir=root))
        try:
            value, fields = build(tmp)
            files = file_records(tmp, (p.name for p in sorted(tmp.iterdir()) if p.is_file() and p.name != MANIFEST))
            manifest = {**fields, "format": CACHE_FORMAT, "key": key, "files": files, "build_id": uuid.uuid4().hex}
            write_manifest(tmp / MANIFEST, manifest)
            _discard(entry)
            os.replace(tmp, entry)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return Fetched(value, False, entry, manifest)


# ---------------------------------------------------------------------------------------------------- model entries

WEIGHTS_FILE = "model.safetensors"
HISTORY_FILE = "history.json"


def save_model_entry(directory: Path, model: PreTrainedModel, history: RecorderHistory) -> None:
    """A fine-tuned model's files: `save_pretrained` (config.json, model.safetensors: a normal HF model directory,
    written without its progress bar) and the recorder history."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model.save_pretrained(str(directory), safe_serialization=True)
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()
    (directory / HISTORY_FILE).write_text(history_to_json(history), encoding="utf-8")


def load_model_entry(
    entry: Path, manifest: dict[str, Any], skeleton: PreTrainedModel
) -> tuple[PreTrainedModel, RecorderHistory]:
    """Weights into a freshly built model of the same config; the weights fingerprint must match the manifest's."""
    import dataclasses

    from safetensors.torch import load_file

    state = load_file(str(entry / WEIGHTS_FILE))
    missing, unexpected = skeleton.load_state_dict(state, strict=False)
    if unexpected or not all(_is_tied(skeleton, k) for k in missing):
        raise CacheCorrupt(f"{WEIGHTS_FILE} does not fit the model (missing {missing}, unexpected {unexpected})")
    expected = manifest.get("fingerprint")
    actual = dataclasses.asdict(model_fingerprint(skeleton))
    if expected != actual:
        raise CacheCorrupt(f"the loaded weights' fingerprint {actual} is not the manifest's {expected}")
    history = history_from_json((entry / HISTORY_FILE).read_text(encoding="utf-8"), source=str(entry / HISTORY_FILE))
    return skeleton, history


def _is_tied(model: PreTrainedModel, name: str) -> bool:
    """Whether parameter `name` shares storage with another (tied embeddings are saved once)."""
    state = model.state_dict()
    tensor = state.get(name)
    if tensor is None:
        return False
    return any(k != name and v.data_ptr() == tensor.data_ptr() for k, v in state.items())
