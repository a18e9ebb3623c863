"""Knowing when a model's weights changed without reading them: what lets `weights_hash()` be computed once per model
state instead of once per `record()` call.

After a model is hashed, its state dict is remembered as, per entry: the name, the tensor's storage (by identity, a
weak reference), data pointer, storage offset, dtype, shape, strides, device and autograd version counter. A later
call reuses the digest only when all of that is as remembered, no `torch.optim` optimizer has stepped since, and a
sample of every tensor is bitwise unchanged. Each layer catches what the others cannot:

- in-place writes through the tensor or an alias sharing its version counter (`load_state_dict`'s `copy_`,
  `param.add_()` under `torch.no_grad()`, `nn.init.*_`, `param.detach().mul_()`, foreach optimizers) bump the version
  counter;
- `param.data = t` keeps the version counter but swaps the storage; `.to(dtype)`, `.to(device)`, `.half()` do the
  same or build new tensors; a new `nn.Parameter` or module, `load_state_dict(assign=True)`, resizing or registering
  buffers change the storage, shape or names. Storages are compared by identity, not only by address: a freed
  storage's address is often handed to the next allocation of the same size;
- fused optimizers (`AdamW(fused=True)`, the Trainer's default on torch >= 2.8) write without bumping the version
  counter: every optimizer step is counted through torch's global optimizer step hook;
- writes torch does not track at all (in place through `param.data`, whose alias gets a fresh version counter, or
  through a numpy or DLPack view) are caught by the sample: every element of vectors and one element of every row
  of larger tensors (on the diagonal when there are at least as many columns as rows, which samples every column
  too; else in the first column), compared bit for bit. So such a write is seen when it touches a whole tensor (a
  LoRA merge's `weight.data += delta`, a hand-written SGD step on `.data`, `weight.data.normal_()`) or a row (an
  embedding row set through `.data`). A write of single elements through `.data` away from the sample is not: call
  `pytest_genguard.hf.fingerprint.forget_weights(model)` after one. Checking every byte would cost what hashing costs.

Anything unusual (inference-mode tensors without a version counter, tensors without storage) is not cached: the
weights are hashed on every call, as before.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["forget", "lookup", "remember", "watched"]


@dataclasses.dataclass(frozen=True)
class _Entry:
    """One state-dict tensor as it was when the model was hashed."""

    storage: weakref.ref[Any]
    state: tuple[Any, ...]


@dataclasses.dataclass(frozen=True)
class _Watch:
    model: weakref.ref[Any]
    names: tuple[str, ...]
    entries: tuple[_Entry, ...]
    samples: tuple[torch.Tensor, ...]  # the sampled elements as integers, one tensor per (device, dtype) group
    optimizer_steps: int
    digest: str
    files: tuple[Any, ...] = ()  # the files offloaded weights are read from, in their states (`hf.offload.watch_key`)


_WATCHES: dict[int, _Watch] = {}
_LOCK = threading.Lock()
_optimizer_steps = 0
_hooked = False


def _count_step(optimizer: Any, args: Any, kwargs: Any) -> None:
    global _optimizer_steps
    _optimizer_steps += 1


def _hook_optimizers() -> None:
    """Count every optimizer step from now on (once per process: one integer increment per step)."""
    global _hooked
    with _LOCK:
        if _hooked:
            return
        from torch.optim.optimizer import register_optimizer_step_post_hook

        register_optimizer_step_post_hook(_count_step)
        _hooked = True


@functools.cache
def _integers() -> dict[int, torch.dtype]:
    """An integer dtype per element size: samples are compared as bits."""
    import torch

    return {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _state(t: torch.Tensor) -> tuple[Any, ...]:
    return (t.data_ptr(), t.storage_offset(), t.dtype, tuple(t.shape), t.stride(), t.device, t._version)


def _sample_view(t: torch.Tensor) -> torch.Tensor | None:
    """A view of the sampled elements of `t` (no copy): a vector whole; of anything larger one element per row, on
    the diagonal where there are at least as many columns as rows (so every column is sampled too), else in the
    first column."""
    dims = t.dim()
    if t.numel() == 0:
        return None
    if dims == 1:
        return t
    if dims == 0:
        return t.reshape(1)
    if dims > 2:
        t = t[(slice(None), slice(None)) + (0,) * (dims - 2)]
    return t.diagonal() if t.shape[0] <= t.shape[1] else t.select(1, 0)


def _samples(tensors: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """The sampled elements' bits: one gather per (device, dtype) group, on the device where the weights live."""
    import torch

    groups: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
    with torch.no_grad():  # views of parameters would otherwise each record an autograd node
        for t in tensors:
            view = _sample_view(t)
            if view is not None:
                groups.setdefault((t.device, t.dtype), []).append(view)
        # Compared as integers of the element's width: bitwise, so NaN weights compare equal to themselves.
        integers = _integers()
        out = []
        for views in groups.values():
            flat = torch.cat(views)
            out.append(flat.view(integers.get(flat.element_size(), torch.uint8)))
    return tuple(out)


def _alive(watch: _Watch, model: Any) -> bool:
    return watch.model() is model


def lookup(model: Any, state: Mapping[str, torch.Tensor], files: tuple[Any, ...] = ()) -> str | None:
    """The digest remembered for `model` if none of the tensors in `state` (its `state_dict(keep_vars=True)`) changed
    since, and `files` (the offloaded weights' files in their states) are as remembered, else None."""
    import torch

    with _LOCK:
        watch = _WATCHES.get(id(model))
    if watch is None or not _alive(watch, model) or watch.optimizer_steps != _optimizer_steps:
        return None
    if watch.files != files:
        return None
    if tuple(state) != watch.names:
        return None
    tensors = list(state.values())
    try:
        for t, entry in zip(tensors, watch.entries, strict=True):
            if entry.storage() is not t.untyped_storage() or _state(t) != entry.state:
                return None
        now = _samples(tensors)
    except (RuntimeError, TypeError, ValueError, NotImplementedError):
        return None
    if len(now) != len(watch.samples):
        return None
    if not all(torch.equal(a, b) for a, b in zip(now, watch.samples, strict=True)):
        return None
    return watch.digest


def remember(model: Any, state: Mapping[str, torch.Tensor], digest: str, files: tuple[Any, ...] = ()) -> None:
    """Remember `digest` as the weights hash of `model` in `state` (and `files`, see `lookup`); a model whose tensors
    cannot be watched is not remembered (it is hashed again on every call)."""
    _hook_optimizers()
    steps = _optimizer_steps  # before reading the tensors: a step from here on is a change
    tensors = list(state.values())
    try:
        entries = tuple(_Entry(weakref.ref(t.untyped_storage()), _state(t)) for t in tensors)
        samples = _samples(tensors)
        ref = weakref.ref(model)
    except (RuntimeError, TypeError, ValueError, NotImplementedError):
        forget(model)
        return
    watch = _Watch(
        model=ref,
        names=tuple(state),
        entries=entries,
        samples=samples,
        optimizer_steps=steps,
        digest=digest,
        files=files,
    )
    with _LOCK:
        # Models collected since are dropped here rather than from a weakref callback, which the garbage collector
        # could run on this thread while the lock is held.
        for key in [key for key, old in _WATCHES.items() if old.model() is None]:
            del _WATCHES[key]
        _WATCHES[id(model)] = watch


def forget(model: Any) -> None:
    """Forget `model`: its next weights hash reads every weight."""
    with _LOCK:
        _WATCHES.pop(id(model), None)


def watched() -> int:
    """How many models have a remembered digest (for tests: a collected model must not stay remembered)."""
    with _LOCK:
        return sum(1 for watch in _WATCHES.values() if watch.model() is not None)
