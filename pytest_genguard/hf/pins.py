"""Pinned fine-tuned weights: one model wherever the suite runs.

Training amplifies the rounding of the CPU's kernels: one recipe fine-tuned under AVX2, AVX-512 and the scalar
kernels ends with weights ~1e-2 apart, enough to move logprobs far beyond the float32 rule. Decoding the *same*
weights on those machines moves them by ~1e-6. So snapshots of a fine-tuned model are recorded against pinned
weights: ``pytest --snapshot-update`` trains once and writes the result beside the tests, plain runs load it.

A pin is a folder ``<pin dir>/<arch>-<recipe[:16]>/`` (default pin dir ``<rootdir>/__genguard_pins__``, ini
``genguard_pin_dir``) holding

- ``model.safetensors``: the weights (`safetensors.torch.save_model`: tied weights stored once);
- ``history.json``: the `GenerationRecorder` history of the training that made them;
- ``pin.json``: the manifest, written last: the recipe (hash and inputs), each file's sha256 and size, the weights'
  fingerprint, and the environment the training ran in.

A pin is written whole or not at all (a temporary folder beside it, then renamed) under a lock in the cache
folder, never inside the user's tree. A pin that exists but does not verify is an error naming the file: it is
never silently replaced by other weights.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pytest_genguard.core.errors import PinError
from pytest_genguard.core.files import file_records, file_records_problem, write_manifest

__all__ = [
    "DEFAULT_PIN_DIR",
    "HISTORY_FILE",
    "PIN_FORMAT",
    "PIN_MANIFEST",
    "WEIGHTS_FILE",
    "PinContent",
    "PinMode",
    "folder_for",
    "read_pin",
    "repin_changes",
    "write_pin",
]

PIN_FORMAT = 1
PIN_MANIFEST = "pin.json"
WEIGHTS_FILE = "model.safetensors"
HISTORY_FILE = "history.json"
DEFAULT_PIN_DIR = "__genguard_pins__"

PinMode = Literal["use", "create", "refresh"]
"""How `finetune()` treats a pin: "use" loads it (a missing pin: train here, with a warning); "create" loads it or
trains and writes it when missing (``--snapshot-update``); "refresh" trains and rewrites it (``--genguard-rebuild``)."""


def folder_for(pin_dir: Path, arch: str, recipe: str) -> Path:
    """The pin folder of a recipe: ``<pin dir>/<arch>-<first 16 hex digits of the recipe hash>``."""
    return Path(pin_dir) / f"{arch}-{recipe[:16]}"


def _broken(folder: Path, problem: str) -> PinError:
    return PinError(
        f"pinned weights {folder}: {problem}. A pin is written by genguard as a whole; restore the folder from "
        "version control, or re-train and re-pin it with: pytest --genguard-rebuild"
    )


def read_pin(folder: Path, recipe: str) -> dict[str, Any] | None:
    """The verified manifest of the pin in `folder`, or None when there is no pin there.

    Raises `PinError` when the folder exists but its manifest is unreadable, of another format or recipe, or a
    listed file is missing or does not match its sha256.
    """
    __tracebackhide__ = True
    manifest_path = folder / PIN_MANIFEST
    if not folder.exists():
        return None
    if not manifest_path.is_file():
        raise _broken(folder, f"{PIN_MANIFEST} is missing")
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise _broken(folder, f"{PIN_MANIFEST} is unreadable ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != PIN_FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else None
        raise _broken(folder, f"{PIN_MANIFEST} has format {found!r}; this pytest-genguard reads format {PIN_FORMAT}")
    if manifest.get("recipe") != recipe:
        raise _broken(folder, f"{PIN_MANIFEST} is for recipe {str(manifest.get('recipe'))[:16]}, not {recipe[:16]}")
    files = manifest.get("files")
    if not isinstance(files, dict) or set(files) != {WEIGHTS_FILE, HISTORY_FILE}:
        raise _broken(folder, f"{PIN_MANIFEST} does not list {WEIGHTS_FILE} and {HISTORY_FILE}")
    problem = file_records_problem(folder, files, PIN_MANIFEST, text=(HISTORY_FILE,))
    if problem is not None:
        raise _broken(folder, problem)
    return manifest


@dataclass(frozen=True)
class PinContent:
    """What a pin records besides its files: written into the manifest as given (JSON-able values)."""

    arch: str
    recipe: str
    recipe_inputs: Mapping[str, Any]
    fingerprint: Mapping[str, Any]
    trained_in: Mapping[str, Any]
    train_seconds: float
    run_id: str


def write_pin(folder: Path, content: PinContent, write_files: Callable[[Path], None]) -> dict[str, Any]:
    """Write a pin into `folder` whole or not at all: `write_files(tmp)` writes the weights and the history into a
    temporary folder beside it, the manifest goes in last, then the folder is renamed into place (an existing pin
    is moved aside first and deleted after). Returns the manifest."""
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".tmp", dir=folder.parent))
    try:
        write_files(tmp)
        mask = _umask()  # mkdtemp makes 0700 and safetensors 0600: a pin is the user's file like any other
        os.chmod(tmp, 0o777 & ~mask)
        for name in (WEIGHTS_FILE, HISTORY_FILE):
            os.chmod(tmp / name, 0o666 & ~mask)
        files = file_records(tmp, (WEIGHTS_FILE, HISTORY_FILE))
        manifest = {
            "format": PIN_FORMAT,
            "arch": content.arch,
            "recipe": content.recipe,
            "recipe_inputs": dict(content.recipe_inputs),
            "fingerprint": dict(content.fingerprint),
            "files": files,
            "trained_in": dict(content.trained_in),
            "train_seconds": round(content.train_seconds, 2),
            "run_id": content.run_id,
        }
        write_manifest(tmp / PIN_MANIFEST, manifest)
        old = None
        if folder.exists():
            old = folder.with_name(f".{folder.name}.{uuid.uuid4().hex[:8]}.old")
            os.replace(folder, old)
        os.replace(tmp, folder)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest


def repin_changes(folder: Path, old: Mapping[str, Any] | None, content: PinContent, new_weights: Any) -> list[str]:
    """What re-pinning `folder` moves, for the run's summary (call it before the old pin is replaced): the weights
    (fingerprint, largest difference) and, where they differ from the old pin's, the CPU kernel set and the libraries
    it was trained under. `new_weights` is the new model's state dict."""
    if old is None:
        return ["the old pin did not verify (or was missing): nothing to compare with"]
    old_hash = str(old.get("fingerprint", {}).get("weights_hash", ""))
    new_hash = str(content.fingerprint.get("weights_hash", ""))
    if old_hash == new_hash:
        lines = [f"weights unchanged ({new_hash[:8]})"]
    else:
        lines = [f"weights {old_hash[:8]} -> {new_hash[:8]}{_largest_difference(folder / WEIGHTS_FILE, new_weights)}"]
    was, now = old.get("trained_in", {}), content.trained_in
    if was.get("cpu_capability") != now.get("cpu_capability"):
        lines.append(
            f"re-trained under CPU kernel set {now.get('cpu_capability')}, the old pin under "
            f"{was.get('cpu_capability')}: training amplifies their rounding, so the weights moved although the "
            "recipe did not (snapshots of this model were recorded against the old weights)"
        )
    moved = [f"{k} {was.get(k)} -> {now.get(k)}" for k in ("torch", "transformers") if was.get(k) != now.get(k)]
    if moved:
        lines.append("trained with other libraries: " + ", ".join(moved))
    return lines


def _largest_difference(old_file: Path, new_weights: Any) -> str:
    """The largest difference between the old pin's weights and the new ones, as ", max |Δ| 6.1e-04" ("" when the
    old file cannot be read)."""
    try:
        from safetensors.torch import load_file  # torch side: only when re-pinning

        old = load_file(str(old_file))
    except Exception:  # an unreadable old file: the fingerprints above say enough
        return ""
    diffs = [
        float((old[name].float() - tensor.detach().cpu().float()).abs().max())
        for name, tensor in new_weights.items()
        if name in old and old[name].shape == tensor.shape and tensor.numel()
    ]
    return f", max |Δ| {max(diffs):.2g}" if diffs else ""


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
