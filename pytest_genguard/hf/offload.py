"""accelerate's dispatched models (``from_pretrained(device_map=..., offload_folder=...)``, `dispatch_model`,
`cpu_offload`, `disk_offload`): where their offloaded weights are, where their inputs go, and a converted copy.

An offloaded module keeps its parameters on the meta device (shapes without data); the `AlignDevicesHook` accelerate
attaches to it brings each weight in from its `weights_map` for the forward pass and drops it afterwards. So every
weight of such a model has data, only not in the parameter: a CPU-offloaded one in a state dict the hooks hold, a
disk-offloaded one in the checkpoint's safetensors (transformers reads a safetensors checkpoint in place) or in a
memory-mapped ``.dat`` file of the offload folder (accelerate's `offload_state_dict`). `offloaded()` finds, for each
meta entry of a state dict, the hook's mapping and key that hold it and the file behind it; `Offloaded.read()` reads
one weight from there, the very tensor the hook brings in (the weights hash streams them one at a time); `unheld()`
names the meta entries no hook holds (a model that really has no weights). `input_device()` is the device the first
layer computes on, where inputs go. `converted_copy()` copies a dispatched model whose offloaded weights are converted
as they come in, since a dispatched model cannot be cast with ``.to()`` (transformers raises) and its offloaded
weights cannot be edited in place.

Nothing here imports accelerate before a model with meta weights is seen.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_genguard.core.file_states import file_state, settled

if TYPE_CHECKING:
    import torch

__all__ = [
    "Convert",
    "Offloaded",
    "converted_copy",
    "cuda_devices",
    "input_device",
    "is_dispatched",
    "offloaded",
    "unheld",
    "untied",
    "watch_key",
]

Convert = Callable[[Any, str, "torch.Tensor"], "torch.Tensor"]
"""A weight's conversion: (the module that owns it, its attribute name, the tensor) -> the converted tensor."""


@dataclasses.dataclass(frozen=True)
class Offloaded:
    """Where an offloaded state-dict entry's data is: the hook's `mapping` and `key` (what the hook reads), the
    tensor itself when it is held in memory (CPU offload), else the file it is read from and its index entry."""

    name: str
    mapping: Mapping[str, Any]
    key: str
    held: Any = None  # torch.Tensor held in memory by the hook's state dict
    file: Path | None = None
    info: tuple[tuple[str, str], ...] = ()  # the offload index's entry (dtype, shape, weight name) as text

    def read(self) -> torch.Tensor:
        """The weight as the hook brings it in (a fresh tensor for a file, the held one for CPU offload)."""
        tensor: torch.Tensor = self.held if self.held is not None else self.mapping[self.key]
        return tensor


def _hooks(module: Any) -> Iterator[Any]:
    """The accelerate hooks on `module` (a `SequentialHook` holds several)."""
    hook = getattr(module, "_hf_hook", None)
    stack = [hook] if hook is not None else []
    while stack:
        current = stack.pop(0)
        inner = getattr(current, "hooks", None)
        if isinstance(inner, (list, tuple)):
            stack = [*inner, *stack]
        else:
            yield current


def is_dispatched(model: Any) -> bool:
    """Whether accelerate dispatched `model` (a device map, or hooks attached by `cpu_offload`/`disk_offload`)."""
    return bool(getattr(model, "hf_device_map", None)) or next(_hooks(model), None) is not None


def _source(mapping: Mapping[str, Any], key: str) -> tuple[Any, Path | None, tuple[tuple[str, str], ...]] | None:
    """(held tensor, file, index entry) of `key` in a hook's `mapping`, found without reading the weight; None when
    the mapping does not hold it. A mapping genguard does not know (a converted copy's) is asked directly."""
    from accelerate.utils.offload import OffloadedWeightsLoader, PrefixedDataset

    while isinstance(mapping, PrefixedDataset):
        key, mapping = f"{mapping.prefix}{key}", mapping.dataset
    if isinstance(mapping, OffloadedWeightsLoader):
        if key in mapping.state_dict:
            return mapping.state_dict[key], None, ()
        entry = mapping.index.get(key)
        if entry is None:
            return None
        info = tuple(sorted((str(k), str(v)) for k, v in entry.items()))
        named = entry.get("safetensors_file")
        if named is not None:
            return None, Path(named), info
        return None, Path(mapping.save_folder) / f"{key}.dat", info
    if isinstance(mapping, dict):
        return (mapping[key], None, ()) if key in mapping else None
    return (None, None, ()) if key in mapping else None


def _find(model: Any, modules: dict[str, Any], name: str) -> Offloaded | None:
    """The offloading hook that holds state-dict entry `name`: on its module or, for a hook that places its
    submodules, on an ancestor (keys relative to the hook's module)."""
    parts = name.split(".")
    for depth in range(len(parts) - 1, -1, -1):
        owner = ".".join(parts[:depth])
        module = modules.get(owner)
        if module is None:
            continue
        key = ".".join(parts[depth:])
        for hook in _hooks(module):
            mapping = getattr(hook, "weights_map", None)
            if not getattr(hook, "offload", False) or mapping is None:
                continue
            found = _source(mapping, key)
            if found is not None:
                return Offloaded(name, mapping, key, *found)
    return None


def _aliases(model: Any) -> dict[str, list[str]]:
    """Each parameter's other names (tied weights: ``lm_head.weight`` is ``model.embed_tokens.weight``)."""
    names: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(param), []).append(name)
    return {n: [m for m in group if m != n] for group in names.values() if len(group) > 1 for n in group}


def _meta_names(state: Mapping[str, Any]) -> list[str]:
    return [name for name, value in state.items() if getattr(value, "is_meta", False)]


def offloaded(model: Any, state: Mapping[str, Any]) -> dict[str, Offloaded]:
    """Where each meta entry of `state` (`model`'s state dict) is held by an accelerate hook; entries no hook holds
    are left out (see `unheld`). Empty for a model without meta entries (nothing is imported then)."""
    meta = _meta_names(state)
    if not meta or not is_dispatched(model):
        return {}
    modules = dict(model.named_modules())
    aliases: dict[str, list[str]] | None = None
    out: dict[str, Offloaded] = {}
    for name in meta:
        found = _find(model, modules, name)
        if found is None:  # a tied weight may be held under its other name
            aliases = _aliases(model) if aliases is None else aliases
            found = next((f for a in aliases.get(name, []) if (f := _find(model, modules, a)) is not None), None)
            found = None if found is None else dataclasses.replace(found, name=name)
        if found is not None:
            out[name] = found
    return out


def unheld(model: Any, state: Mapping[str, Any]) -> list[str]:
    """The meta entries of `state` that no accelerate hook holds: weights with no data anywhere."""
    held = offloaded(model, state)
    return [name for name in _meta_names(state) if name not in held]


def untied(model: Any) -> int:
    """How many parameters `model.parameters()` yields twice because accelerate untied them: after an offloaded
    module's forward pass its hook leaves a meta parameter of its own, so the two modules of a tied pair (``lm_head``
    and the input embeddings) no longer share one. Counted from the model's declared ties (transformers 5's
    ``all_tied_weights_keys``; 4.57's ``_tied_weights_keys`` of the input embeddings, when the config ties them)."""
    if not is_dispatched(model):
        return 0
    params = dict(model.named_parameters(remove_duplicate=False))
    ties = getattr(model, "all_tied_weights_keys", None)
    if not isinstance(ties, dict):
        config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        embeddings = getattr(model.get_input_embeddings(), "weight", None)
        source = next((n for n, p in params.items() if p is embeddings), None)
        declared = getattr(model, "_tied_weights_keys", None) or []
        tied = getattr(config, "tie_word_embeddings", False) and source is not None
        ties = {target: source for target in declared} if tied else {}
    count = 0
    for target, source in ties.items():
        a, b = params.get(target), params.get(source)
        if a is not None and b is not None and a is not b and a.is_meta and b.is_meta:
            count += a.numel()
    return count


def watch_key(entries: Iterable[Offloaded]) -> tuple[Any, ...] | None:
    """What must stay the same for the file-backed weights' hash to stay valid: each file's identity and state and
    its index entry; None when it cannot be kept (a file written within the racy window, a mapping genguard does not
    know). Held tensors are watched as tensors (`weights_watch`), not here."""
    key = []
    for entry in entries:
        if entry.held is not None:
            continue
        if entry.file is None:
            return None
        try:
            state = file_state(entry.file)
        except OSError:
            return None
        key.append((entry.name, str(entry.file), state, entry.info))
    if not settled(s[2] for s in key):
        return None
    return tuple(key)


def _device(value: Any) -> torch.device | None:
    """A device map's or hook's device as a `torch.device` (an index is the machine's accelerator's, as accelerate
    reads it: CUDA where none is available); None for "disk", "meta" and None."""
    import torch

    if value is None or value in ("disk", "meta"):
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        accelerator = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
        return torch.device(accelerator.type if accelerator is not None else "cuda", value)
    return torch.device(value)


def input_device(model: Any) -> torch.device | None:
    """Where a dispatched model's inputs go: the execution device of the hook on its input embeddings, else of the
    hook on the model itself (`dispatch_model`'s main device); None when no hook says."""
    embeddings = None
    getter = getattr(model, "get_input_embeddings", None)
    if callable(getter):
        try:
            embeddings = getter()
        except (AttributeError, NotImplementedError):
            embeddings = None
    for module in (embeddings, model):
        for hook in _hooks(module) if module is not None else ():
            device = _device(getattr(hook, "execution_device", None))
            if device is not None:
                return device
    return None


def cuda_devices(model: Any) -> list[torch.device]:
    """The accelerator devices a dispatched model computes on (its device map's values but "cpu" and "disk"): the
    RNG streams a seeded call must fork."""
    devices = {d for value in (getattr(model, "hf_device_map", None) or {}).values() if (d := _device(value))}
    return sorted((d for d in devices if d.type != "cpu"), key=str)


class _Converted(Mapping[str, Any]):
    """A hook's weights map whose weights are converted as they are read (the converted copy's)."""

    def __init__(self, inner: Mapping[str, Any], module: Any, convert: Convert) -> None:
        self.inner, self.module, self.convert = inner, module, convert

    def __getitem__(self, key: str) -> Any:
        owner_path, _, attribute = key.rpartition(".")
        owner = self.module.get_submodule(owner_path) if owner_path else self.module
        return self.convert(owner, attribute, self.inner[key])

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and _source(self.inner, key) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self.inner)

    def __len__(self) -> int:
        return len(self.inner)


def converted_copy(model: Any, convert: Convert) -> Any:
    """A deep copy of dispatched `model` whose offloaded weights are converted by `convert` as its hooks bring them
    in. The stores behind the hooks (the CPU-offloaded state dict, the offload index) are shared with `model`, not
    copied: the copy costs the weights `model` holds in its parameters, not the offloaded ones. Its in-memory
    weights are the caller's to convert."""
    from accelerate.utils.offload import PrefixedDataset

    shared: dict[int, Any] = {}
    for module in model.modules():
        for hook in _hooks(module):
            mapping = getattr(hook, "weights_map", None)
            while isinstance(mapping, PrefixedDataset):
                mapping = mapping.dataset
            if mapping is not None:
                shared[id(mapping)] = mapping
    out = copy.deepcopy(model, memo=dict(shared))
    for module in out.modules():
        for hook in _hooks(module):
            if getattr(hook, "offload", False) and getattr(hook, "weights_map", None) is not None:
                hook.weights_map = _Converted(hook.weights_map, module, convert)
    return out
