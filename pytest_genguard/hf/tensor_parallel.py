"""transformers' tensor parallelism (``from_pretrained(..., tp_plan="auto")`` under ``torchrun``): a model whose
weights are `DTensor`s, each rank holding a shard of them and computing its part of every layer.

What genguard needs from such a model: its weights hash equal to the same weights' in one process (each DTensor is
hashed whole, `full_tensor()`: an all-gather every rank takes part in, in the same order, one weight at a time), still
computed once per model state (each rank watches its own shards, and the ranks agree, with one all-reduce, whether
any shard changed: a rank that hashed alone would wait forever for the others' all-gathers), and the number of ranks
a trace's environment names (`world_size`): their all-reduces sum in another order than one process does, so a trace
recorded under tensor parallelism is compared with a single process's by the tolerant rule, never bitwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["agreed", "check_heads", "is_dtensor", "local_shards", "whole", "world_size"]


def is_dtensor(value: Any) -> bool:
    """Whether `value` is a torch `DTensor` (a parameter of a tensor-parallel model); torch.distributed is imported
    only when a tensor subclass is seen."""
    import torch

    if type(value) in (torch.Tensor, torch.nn.Parameter) or not isinstance(value, torch.Tensor):
        return False
    from torch.distributed.tensor import DTensor

    return isinstance(value, DTensor)


def whole(value: Any) -> torch.Tensor:
    """The DTensor's full tensor (a collective: every rank of its mesh calls it)."""
    return value.full_tensor()  # type: ignore[no-any-return]


def local_shards(state: Mapping[str, Any]) -> dict[str, Any]:
    """`state` with each DTensor replaced by this rank's shard (what this rank's weights watch can see)."""
    import torch

    with torch.no_grad():  # a view of a parameter's shard would otherwise record an autograd node
        return {name: value.to_local() if is_dtensor(value) else value for name, value in state.items()}


def _mesh(state: Mapping[str, Any]) -> Any:
    return next((value.device_mesh for value in state.values() if is_dtensor(value)), None)


def agreed(state: Mapping[str, Any], flag: bool) -> bool:
    """Whether `flag` holds on every rank of the mesh of `state`'s DTensors (one all-reduce; `flag` itself without
    DTensors)."""
    mesh = _mesh(state)
    if mesh is None:
        return flag
    import torch
    import torch.distributed as dist

    device = (
        "cpu" if mesh.device_type == "cpu" else torch.device(mesh.device_type, torch.accelerator.current_device_index())
    )
    value = torch.tensor([1 if flag else 0], dtype=torch.int32, device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MIN, group=mesh.get_group())
    return bool(value.item())


def world_size(model: Any) -> int | None:
    """How many ranks share `model`'s weights (the size of its DTensors' mesh); None for a model in one process."""
    parameters = getattr(model, "parameters", None)
    if not callable(parameters):
        return None
    mesh = next((p.device_mesh for p in parameters() if is_dtensor(p)), None)
    return None if mesh is None else int(mesh.size())


def check_heads(model: Any, where: str) -> None:
    """A tensor-parallel model whose attention heads do not divide among its ranks: transformers shards the query,
    key and value projections by columns, so each rank's share is not whole heads and the first forward pass fails
    with ``shape [...] is invalid for input of size ...`` (SmolLM2-135M's 9 heads over 2 ranks). Said before it
    runs, with the rank counts that work."""
    ranks = world_size(model)
    if ranks is None:
        return
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    heads = getattr(config, "num_attention_heads", None)
    kv = getattr(config, "num_key_value_heads", None) or heads
    if not isinstance(heads, int) or not isinstance(kv, int) or (heads % ranks == 0 and kv % ranks == 0):
        return
    fits = [n for n in range(2, min(heads, kv) + 1) if heads % n == 0 and kv % n == 0]
    advice = f"run torchrun with --nproc-per-node {' or '.join(map(str, fits))}" if fits else "run it in one process"
    raise ValueError(
        f"{where}: the model is split over {ranks} ranks by tensor parallelism (tp_plan), but its {heads} attention "
        f"heads ({kv} key-value heads) do not divide by {ranks}: each rank would hold part of a head and the forward "
        f"pass fails in transformers; {advice}."
    )
