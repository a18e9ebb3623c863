"""`finetune()`: tiny models fine-tuned offline with a real HF `Trainer` into sharp, cached snapshot subjects.

Random-init tiny models give near-uniform logits whose argmax flips on rounding; fine-tuned on eight short sentences
that end in EOS, the same models answer the probe prompts with top-1/top-2 margins of several nats, so snapshots of
them are stable. Training runs through the `Trainer` users run (decoder-only: `Trainer`; T5: `Seq2SeqTrainer`) with
a `GenerationRecorder` on the probe prompts, and the result is cached by content (see `cache.py`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack

from pytest_genguard.core.errors import GenguardPinWarning, PinError
from pytest_genguard.core.events import PinEvent, emit
from pytest_genguard.core.history import RecorderHistory, history_from_json, history_to_json
from pytest_genguard.core.trace import ModelFingerprint
from pytest_genguard.hf.cache import (
    CACHE_FORMAT,
    cache_key,
    default_cache_dir,
    fetch,
    key_lock,
    load_model_entry,
    save_model_entry,
)
from pytest_genguard.hf.environment import cpu_capability
from pytest_genguard.hf.fingerprint import config_hash, model_fingerprint
from pytest_genguard.hf.inputs import torch_device
from pytest_genguard.hf.pins import (
    HISTORY_FILE,
    WEIGHTS_FILE,
    PinContent,
    PinMode,
    folder_for,
    read_pin,
    repin_changes,
    write_pin,
)
from pytest_genguard.hf.recipe import (
    LR_SCHEDULER,
    RECORD_MAX_NEW_TOKENS,
    RECORD_TOP_K,
    TRAIN_THREADS,
    Recipe,
    RecipeArgs,
    recipe_hash,
    recipe_inputs,
)
from pytest_genguard.hf.tiny import tiny_model, tiny_tokenizer
from pytest_genguard.hf.tokenizer_hash import tokenizer_fingerprint
from pytest_genguard.hf.training import train, training_defaults
from pytest_genguard.hf.weights_hash import weights_hash

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerFast


__all__ = ["Build", "FineTuned", "Pinning", "cache_key_parts", "finetune", "make"]


@dataclass(frozen=True, eq=False)
class FineTuned:
    """A fine-tuned tiny model with what its training recorded. Shared between tests: treat it as read-only."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerFast
    history: RecorderHistory
    fingerprint: ModelFingerprint
    arch: str
    cache_key: str
    from_cache: bool
    train_seconds: float
    """Seconds the training took when the entry was built (also for a model loaded from the cache)."""
    cache_path: Path | None = None
    pin: Path | None = None
    """The pin folder the weights came from or were written to (None: trained on this machine, not pinned)."""


# ---------------------------------------------------------------------------------------------------- identity


def _versions() -> dict[str, str]:
    out = {}
    for dist in ("torch", "transformers", "accelerate", "pytest-genguard"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "missing"
    return out


def cache_key_parts(spec: Recipe, model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast) -> Any:
    """Everything that determines the weights training makes on this machine: the recipe, the libraries, and the
    CPU kernel set (training amplifies its rounding: AVX2 and the scalar kernels train other weights)."""

    versions = _versions()
    versions.pop("pytest-genguard")  # the cache format version stands for our code
    return {
        "arch": spec.arch,
        "model_config": config_hash(model),
        "initial_weights": weights_hash(model),
        "tokenizer": tokenizer_fingerprint(tokenizer).hash,
        "corpus": hashlib.sha256(json.dumps(spec.corpus).encode()).hexdigest(),
        "prompts": list(spec.prompts),
        "training": {
            "steps": spec.steps,
            "learning_rate": spec.learning_rate,
            "batch_size": spec.batch_size,
            "lr_scheduler": LR_SCHEDULER,
            "every_n_steps": spec.every_n_steps,
            "record": [RECORD_MAX_NEW_TOKENS, RECORD_TOP_K],
            "threads": TRAIN_THREADS,
            **training_defaults(),
        },
        "seed": spec.seed,
        "versions": versions,
        "cpu_capability": cpu_capability(),
        "format": CACHE_FORMAT,
    }


# ---------------------------------------------------------------------------------------------------- training here


@dataclass(frozen=True)
class Build:
    """How this process builds fine-tuned models: the cache folder, the device the result goes to, whether the
    Trainer shows progress, when to retrain a cached entry (`force`, given its manifest), and this run's id (one per
    pytest run, shared by its xdist workers, so --genguard-rebuild retrains once)."""

    root: Path
    device: torch.device
    progress: bool
    force: Callable[[dict[str, Any]], bool]
    run_id: str


def _trained(spec: Recipe, build: Build) -> FineTuned:
    """Fine-tuned on this machine, through the per-machine cache."""
    root, device, progress, force, run_id = build.root, build.device, build.progress, build.force, build.run_id

    tokenizer = tiny_tokenizer()
    skeleton = tiny_model(spec.arch, seed=spec.seed)
    parts = cache_key_parts(spec, skeleton, tokenizer)
    key = cache_key(parts)
    recipe = recipe_hash(spec)

    def trained_entry(tmp: Path) -> tuple[tuple[PreTrainedModel, RecorderHistory], dict[str, Any]]:
        model = tiny_model(spec.arch, seed=spec.seed)
        model.config.genguard_recipe = recipe  # before training: the recorder's checkpoint traces carry it too
        history, seconds = train(spec, model, tokenizer, progress)
        save_model_entry(tmp, model, history)
        fields = {
            "key_parts": parts,
            "fingerprint": dataclasses.asdict(model_fingerprint(model)),
            "versions": _versions(),
            "train_seconds": seconds,
            "run_id": run_id,
        }
        return (model, history), fields

    def load(entry: Path, manifest: dict[str, Any]) -> tuple[PreTrainedModel, RecorderHistory]:
        skeleton.config.genguard_recipe = recipe
        return load_model_entry(entry, manifest, skeleton)

    fetched = fetch(root, key, build=trained_entry, load=load, force=force)
    model, history = fetched.value
    model = model.to(device)
    model.eval()
    return FineTuned(
        model=model,
        tokenizer=tokenizer,
        history=history,
        fingerprint=_fingerprint(fetched.manifest["fingerprint"]),
        arch=spec.arch,
        cache_key=key,
        from_cache=fetched.from_cache,
        train_seconds=float(fetched.manifest.get("train_seconds", 0.0)),
        cache_path=fetched.path,
    )


def _fingerprint(fields: dict[str, Any]) -> ModelFingerprint:
    return ModelFingerprint(**fields)


# ---------------------------------------------------------------------------------------------------- pinned


@dataclass(frozen=True)
class Pinning:
    """Where pins live and what to do about them (see `pins.PinMode`)."""

    pin_dir: Path
    mode: PinMode = "create"


def _pinned(spec: Recipe, build: Build, pinning: Pinning) -> FineTuned:
    """The pinned weights of `spec`: loaded when pinned, else trained here and pinned (mode "create"/"refresh"),
    or trained here with a `GenguardPinWarning` (mode "use"). A pin that does not verify raises `PinError`."""
    __tracebackhide__ = True
    root, device, run_id = build.root, build.device, build.run_id
    recipe = recipe_hash(spec)
    folder = folder_for(pinning.pin_dir, spec.arch, recipe)
    lock = "pin-" + hashlib.sha256(str(folder.resolve()).encode()).hexdigest()
    root.mkdir(parents=True, exist_ok=True)
    with key_lock(root, lock):  # xdist workers wanting the same pin: one writes it, the others load it
        manifest = existing = None
        if pinning.mode == "refresh":
            try:  # --genguard-rebuild re-pins once per run, whatever state the old pin is in
                existing = read_pin(folder, recipe)
            except PinError:
                existing = None
            if existing is not None and existing.get("run_id") == run_id:
                manifest = existing
        else:
            manifest = read_pin(folder, recipe)
        if manifest is not None:
            loaded = _load_pin(spec, folder, manifest, recipe, device)
            emit(PinEvent(str(folder), "loaded"))
            return loaded
        if pinning.mode == "use":
            warnings.warn(
                GenguardPinWarning(
                    f"no pinned weights for genguard_finetune({spec.arch!r}) (recipe {recipe[:16]}) in {folder}: "
                    "trained on this machine instead, so snapshots of its decoding hold only where the CPU's kernels "
                    "round the same way; pin the weights with: pytest --snapshot-update (then commit the pin folder)"
                ),
                stacklevel=4,  # the caller of finetune() or of the genguard_finetune fixture
            )
            return _trained(spec, build)
        import torch

        tuned = _trained(spec, dataclasses.replace(build, device=torch.device("cpu")))
        content = _pin_content(spec, tuned, recipe, run_id)
        refreshed = pinning.mode == "refresh" and folder.exists()
        changes = repin_changes(folder, existing, content, tuned.model.state_dict()) if refreshed else []
        write_pin(folder, content, lambda tmp: _write_pin_files(tmp, tuned))
        emit(PinEvent(str(folder), "re-pinned" if refreshed else "created", tuple(changes)))
        model = tuned.model.to(device)
        model.eval()
        return dataclasses.replace(tuned, model=model, pin=folder)


def _pin_content(spec: Recipe, tuned: FineTuned, recipe: str, run_id: str) -> PinContent:
    import platform

    trained_in = {
        **_versions(),
        "cpu_capability": cpu_capability(),
        "threads": TRAIN_THREADS,
        "python": platform.python_version(),
        "platform": f"{sys.platform}-{platform.machine()}",
    }
    fingerprint = dataclasses.asdict(tuned.fingerprint)
    fingerprint.pop("config", None)  # the config is the recipe's, listed under recipe_inputs
    return PinContent(
        arch=spec.arch,
        recipe=recipe,
        recipe_inputs=recipe_inputs(spec),
        fingerprint=fingerprint,
        trained_in=trained_in,
        train_seconds=tuned.train_seconds,
        run_id=run_id,
    )


def _write_pin_files(tmp: Path, tuned: FineTuned) -> None:
    from safetensors.torch import save_model

    save_model(tuned.model, str(tmp / WEIGHTS_FILE))
    (tmp / HISTORY_FILE).write_text(history_to_json(tuned.history), encoding="utf-8")


def _load_pin(spec: Recipe, folder: Path, manifest: dict[str, Any], recipe: str, device: torch.device) -> FineTuned:
    __tracebackhide__ = True
    from safetensors.torch import load_model

    model = tiny_model(spec.arch, seed=spec.seed)
    model.config.genguard_recipe = recipe
    weights = folder / WEIGHTS_FILE
    try:
        load_model(model, str(weights), strict=True)
    except Exception as exc:  # safetensors/torch errors for a file that does not fit: say which file
        raise PinError(
            f"pinned weights {weights} do not fit genguard's tiny {spec.arch} ({type(exc).__name__}: {exc}); "
            "re-pin them with: pytest --genguard-rebuild"
        ) from None
    fingerprint = model_fingerprint(model)
    expected = manifest.get("fingerprint", {}).get("weights_hash")
    if fingerprint.weights_hash != expected:
        raise PinError(
            f"pinned weights {weights}: their fingerprint {fingerprint.weights_hash[:16]} is not the manifest's "
            f"{str(expected)[:16]}; re-pin them with: pytest --genguard-rebuild"
        )
    history_path = folder / HISTORY_FILE
    history = history_from_json(history_path.read_text(encoding="utf-8"), source=str(history_path))
    model = model.to(device)
    model.eval()
    return FineTuned(
        model=model,
        tokenizer=tiny_tokenizer(),
        history=history,
        fingerprint=fingerprint,
        arch=spec.arch,
        cache_key=recipe,
        from_cache=True,
        train_seconds=float(manifest.get("train_seconds", 0.0)),
        cache_path=None,
        pin=folder,
    )


# ---------------------------------------------------------------------------------------------------- public


def finetune(
    arch: str | Recipe = "gpt2",
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    rebuild: bool = False,
    device: torch.device | str | None = None,
    progress: bool | None = None,
    pin_dir: str | os.PathLike[str] | None = None,
    pin: PinMode = "create",
    **recipe: Unpack[RecipeArgs],
) -> FineTuned:
    """Fine-tune `tiny_model(arch, seed)` on `corpus` (default: the shipped sentences) with a HF Trainer, recording
    `prompts` (default: the shipped probes) as it goes; cached under `cache_dir` (default: `$GENGUARD_CACHE_DIR`,
    else the user cache dir). `rebuild=True` retrains. `progress=None` shows the Trainer's bar on a terminal. The
    recipe (`steps`, `seed`, `corpus`, `prompts`, `learning_rate`, `batch_size`) can also be given as a `Recipe`.

    With `pin_dir`, the weights are pinned there (see `pytest_genguard.hf.pins`): an existing pin is loaded instead of
    training, so the model is the same on every machine; `pin` says what to do when there is none ("create": train
    and write it; "use": train here with a warning; "refresh": retrain and rewrite it).
    """
    spec = Recipe.of(arch, **recipe)
    if pin not in ("use", "create", "refresh"):
        raise ValueError(f"finetune(pin={pin!r}): must be 'use', 'create' or 'refresh'")
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    show = sys.stderr.isatty() if progress is None else bool(progress)
    pinning = None if pin_dir is None else Pinning(Path(pin_dir), pin)
    target = torch_device(device, "finetune()")  # checked before training starts (training always runs on the CPU)
    return make(spec, Build(root, target, show, lambda manifest: rebuild, uuid.uuid4().hex), pinning)


def make(spec: Recipe, build: Build, pinning: Pinning | None) -> FineTuned:
    """The fine-tuned model of `spec`: trained here through the cache (`pinning` None) or pinned."""
    __tracebackhide__ = True
    if pinning is None:
        return _trained(spec, build)
    return _pinned(spec, build, pinning)
