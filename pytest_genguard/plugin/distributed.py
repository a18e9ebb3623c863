"""pytest under ``torchrun`` (``torchrun --nproc-per-node N -m pytest ...``): a suite whose models are split over
several processes by transformers' tensor parallelism (``from_pretrained(..., tp_plan="auto")``).

Every rank runs every test: a tensor-parallel forward pass needs all of them, so every rank records, teacher forces
and compares. Only rank 0 writes: snapshots and baselines, the HTML report, reference traces, deleted pins and
syrupy's unused snapshots are rank 0's; the other ranks (*followers*) judge the same assertions and report what rank
0 wrote. Once the ranks' process group is up, every assertion ends in one collective (`disagreement`): the ranks
exchange their verdicts (and, when writing, a digest of the text), so each has read the stored snapshot before rank
0 writes it, and a rank that computed something else fails on every rank rather than leaving rank 0's file to stand
for it. A tensor-parallel model gives every rank the same logits (its last layer is gathered), so the ranks agree.

The rank is torch.distributed's once its process group is initialised, else torchrun's ``RANK``/``WORLD_SIZE``
environment variables; torch is never imported here (only asked, when something else imported it).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import pytest

    from pytest_genguard.plugin.settings import Settings

__all__ = ["configure", "disagreement", "finish", "follower", "from_rank_zero", "local_rank", "rank"]

T = TypeVar("T")


def _group() -> Any:
    """torch.distributed when it is imported, initialised and has more than one rank; else None."""
    torch = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None) if torch is not None else None
    if dist is None or not dist.is_available() or not dist.is_initialized() or dist.get_world_size() < 2:
        return None
    return dist


def rank() -> tuple[int, int]:
    """(this process's rank, the number of ranks): torch.distributed's, else torchrun's environment, else (0, 1)."""
    dist = _group()
    if dist is not None:
        return int(dist.get_rank()), int(dist.get_world_size())
    try:
        return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 0, 1


def local_rank() -> tuple[int, int] | None:
    """(this process's rank on its machine, the ranks on its machine) under torchrun (``LOCAL_RANK``,
    ``LOCAL_WORLD_SIZE``); None outside it: which GPU a rank takes in GPU mode, as an xdist worker's index does."""
    try:
        index, world = int(os.environ["LOCAL_RANK"]), int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    except (KeyError, ValueError):
        return None
    return (index, world) if world > 1 else None


def follower() -> bool:
    """Whether this process is a rank other than 0 of a torchrun job: it judges, rank 0 writes."""
    index, world = rank()
    return world > 1 and index != 0


def configure(config: pytest.Config, current: Settings) -> Settings:
    """A follower's settings: no HTML report, no reference traces written, no judgement of syrupy's unused snapshots
    (rank 0 writes and judges them all); rank 0's, and a run outside torchrun's, unchanged."""
    if not follower():
        return current
    config.option.disable_unused_snapshots = True  # syrupy's --snapshot-disable-unused
    return dataclasses.replace(current, report=None, record_reference=None)


def disagreement(name: str, verdict: str | None, text: str | None) -> list[str] | None:
    """The failure lines when the ranks reached different verdicts (or would write different texts) for snapshot
    `name`; None when they agree, and outside a torch.distributed job. A collective: every rank calls it once per
    assertion, after reading the stored snapshot and before rank 0 writes."""
    dist = _group()
    if dist is None:
        return None
    mine = (verdict or "nothing to compare with", None if text is None else hashlib.sha256(text.encode()).hexdigest())
    everyone: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    if all(other == everyone[0] for other in everyone):
        return None
    said = ", ".join(
        f"rank {i}: {v}{'' if d is None else f' (would write {d[:12]})'}" for i, (v, d) in enumerate(everyone)
    )
    return [
        f"genguard snapshot {name!r}: the ranks of this torchrun job disagree ({said})",
        "every rank computes the trace and rank 0 writes it, so they must agree; a tensor-parallel model gives every "
        "rank the same logits, so ranks that differ ran different prompts, seeds or models (a rank-dependent seed, "
        "a model loaded without tp_plan on one rank): make the test the same on every rank",
    ]


def from_rank_zero(write: Callable[[], T]) -> T | None:
    """Rank 0's `write()`, on every rank: rank 0 runs it and sends what it returned (or the OSError it raised, raised
    again on every rank) to the others, so that each reports what rank 0 wrote, after it was written. Outside a
    process group: `write()` on rank 0 and outside torchrun, None on a follower (rank 0 writes)."""
    dist = _group()
    if dist is None:
        return None if follower() else write()
    box: list[Any] = [None]
    if dist.get_rank() == 0:
        try:
            box = [(True, write())]
        except OSError as exc:
            box = [(False, exc)]
    dist.broadcast_object_list(box, src=0)
    ok, value = box[0]
    if not ok:
        raise value
    result: T = value
    return result


def finish() -> None:
    """At the end of the session, wait for every rank: torchrun stops the other ranks as soon as one exits with an
    error (a failed test), which would cut rank 0's writes and summary short."""
    dist = _group()
    if dist is not None:
        dist.barrier()
