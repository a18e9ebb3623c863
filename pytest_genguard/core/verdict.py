"""What a check concluded: the comparison `Verdict` (with the one severity order), what a snapshot check did
besides comparing (`Status`), where a comparison diverged (`Divergence`, `ErrorStats`), and the command that
re-records a snapshot for a verdict (`rerecord_command`). Standard library only.
"""

from __future__ import annotations

import enum
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "SNAPSHOT_UPDATE",
    "UPDATE_STALE",
    "Divergence",
    "DivergenceKind",
    "ErrorStats",
    "Rerecord",
    "Status",
    "Verdict",
    "rerecord_command",
    "worst",
]

DivergenceKind = Literal["token", "logprob", "topk", "length", "finish_reason", "prompt"]


class Verdict(enum.StrEnum):
    """The outcome of a comparison, best first: the order of the members is the severity order (REGRESSION and
    STALE fail; STALE is the worst, since a stale reference says nothing about the behaviour)."""

    IDENTICAL = "identical"
    WITHIN_TOLERANCE = "within tolerance"
    TOLERATED = "tolerated divergence"
    REGRESSION = "regression"
    STALE = "stale"

    @property
    def ok(self) -> bool:
        """Whether the comparison holds (identical, within tolerance, or a tolerated near-tie divergence)."""
        return self in (Verdict.IDENTICAL, Verdict.WITHIN_TOLERANCE, Verdict.TOLERATED)

    @property
    def severity(self) -> int:
        """0 for IDENTICAL up to 4 for STALE (the declaration order)."""
        return _ORDER.index(self)


_ORDER: tuple[Verdict, ...] = tuple(Verdict)


def worst(verdicts: Iterable[Verdict], default: Verdict = Verdict.IDENTICAL) -> Verdict:
    """The most severe of `verdicts` (`default` when there are none)."""
    return max(verdicts, key=lambda v: v.severity, default=default)


class Status(enum.StrEnum):
    """What a check did when it did not (only) compare: a snapshot created, re-recorded, missing, unreadable,
    refused for NaN/inf, not written; a reference trace recorded; an invariant that held or not."""

    CREATED = "created"
    UPDATED = "updated"
    MISSING = "missing"
    INVALID = "invalid"
    NON_FINITE = "non-finite"
    WRITE_ERROR = "write error"
    RECORDED = "recorded"
    OK = "ok"
    FAILED = "failed"


UPDATE_STALE = "pytest --genguard-update-stale"
"""Re-records only the snapshots whose model, tokenizer, settings or prompts changed."""
SNAPSHOT_UPDATE = "pytest --snapshot-update"
PER_ENV_OPTIONS = ("--genguard-baselines", "per-env")


@dataclass(frozen=True)
class Rerecord:
    """What a fix command re-records: the snapshots of some tests (node ids or files), per-env baselines or not."""

    targets: tuple[str, ...] = ()
    per_env: bool = False

    def command(self, verdict: Verdict | Status) -> str | None:
        """The command for `verdict` (None when it needs none)."""
        return rerecord_command(verdict, self.targets, per_env=self.per_env)


def rerecord_command(verdict: Verdict | Status, targets: Sequence[str] = (), *, per_env: bool = False) -> str | None:
    """The command that re-records the snapshots of `targets` (node ids or files) for a failing `verdict`; None for a
    verdict that needs nothing. Per-env baselines keep their option: without it the shared snapshot is rewritten."""
    if verdict is Verdict.STALE:
        head = UPDATE_STALE
    elif verdict in (Verdict.REGRESSION, Status.MISSING, Status.INVALID):
        head = SNAPSHOT_UPDATE
    else:
        return None
    options = list(PER_ENV_OPTIONS) if per_env else []
    flag = head.split()[1]
    return " ".join(["pytest", *options, flag, *(shlex.quote(t) for t in targets)])


@dataclass(frozen=True)
class Divergence:
    """Where one prompt's new generation first stops matching the recorded one, and why.

    `kind` is "token" (a different token, or the same id decoding to different text), "logprob" (chosen logprob or
    score beyond tolerance), "topk" (a top-k value beyond tolerance, or a token new to/gone from the top-k that did
    not just cross its edge), "length", "finish_reason" or "prompt" (same prompt text, different prompt ids).
    `step` is 0-based: the step of the split, the first step one side lacks ("length"), the last step
    ("finish_reason"), or 0 ("prompt"). Ranks are 0-based ranks of each side's token in the other side's top-k.
    `gap` is the near-tie gap: max(|lp_exp[exp] - lp_exp[act]|, |lp_act[act] - lp_act[exp]|), None where a token is
    absent from the other's top-k. `tolerated` is True for a near-tie split.
    """

    prompt_index: int
    prompt: str
    step: int
    kind: DivergenceKind
    expected_token_id: int | None = None
    actual_token_id: int | None = None
    expected_token: str | None = None
    actual_token: str | None = None
    expected_logprob: float | None = None
    actual_logprob: float | None = None
    expected_rank_in_actual: int | None = None
    actual_rank_in_expected: int | None = None
    expected_margin: float | None = None
    actual_margin: float | None = None
    gap: float | None = None
    detail: str = ""
    tolerated: bool = False

    @property
    def verdict(self) -> Verdict:
        return Verdict.TOLERATED if self.tolerated else Verdict.REGRESSION


@dataclass(frozen=True)
class ErrorStats:
    """Error statistics over the float values compared (pytest-regressions style).

    `compared` counts value pairs checked (chosen logprob, score, each top-k entry); `exceeded` those beyond
    tolerance; `max_abs`/`mean_abs`/`max_rel` the absolute and relative errors (inf where one side is non-finite and
    the other differs); `worst` where the largest absolute error is ("prompt 0 step 3 top_logprobs[2]"), None when
    every value is equal; `max_share` the largest |difference| / allowance (1.0: the edge of the tolerance) and
    `max_share_at` where: how close a passing trace came to failing.
    """

    compared: int = 0
    exceeded: int = 0
    max_abs: float = 0.0
    mean_abs: float = 0.0
    max_rel: float = 0.0
    worst: str | None = None
    max_share: float = 0.0
    max_share_at: str | None = None

    @property
    def exceeded_share(self) -> float:
        return self.exceeded / self.compared if self.compared else 0.0
