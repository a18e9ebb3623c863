"""What a model change did: per check (`Change`: which prompts diverged, where, whether near ties, the KLD on the
recorded paths where it was computed) and across a run's checks (`SuiteChange`), for the terminal summary, the HTML
report, the markdown job summary and `genguard review`. Standard library only.

A prompt's divergence is a *path change* (its tokens split from the recorded ones somewhere, or its length, finish
reason or prompt tokens changed), a *value drift* (the same tokens all along, a logprob or top-k value beyond
tolerance), or a *near tie* (a tolerated split). The comparison rule stops at a prompt's first divergence, so a value
drift at step 0 says nothing of the path: the split is found from the two token paths themselves. The KLD
comes from `verify()` (the new model teacher forced along the snapshot's path, up to the step where it prefers
another token: a lower bound from the recorded top-k) and from fidelity judgements (`FidelityReport`: exact with the
model in process, else a lower bound); a plain ``==`` comparison of two generated traces has none.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_genguard.core.comparison import Comparison, describe, headline
from pytest_genguard.core.fidelity import StepFidelity, aggregate
from pytest_genguard.core.text import number, plural, quote
from pytest_genguard.core.trace import PromptTrace

__all__ = [
    "PATH_KINDS",
    "Change",
    "Kld",
    "PromptChange",
    "SuiteChange",
    "change_of",
    "kld_of",
    "path_split",
    "step_bucket",
]

PATH_KINDS = frozenset({"token", "length", "finish_reason", "prompt"})
"""Divergence kinds that change what a prompt generates (the others, logprob and topk, drift in value only)."""

_BUCKETS = (0, 1, 4, 16, 64, 256)
_WHY_WIDTH = 200


def step_bucket(step: int) -> str:
    """The step range a first divergence falls in: ``0``, ``1-3``, ``4-15``, ``16-63``, ``64-255``, ``256+``."""
    for low, high in itertools.pairwise(_BUCKETS):
        if step < high:
            return str(low) if high - low == 1 else f"{low}-{high - 1}"
    return f"{_BUCKETS[-1]}+"


@dataclass(frozen=True)
class PromptChange:
    """One prompt's first divergence: where, of what kind, whether tolerated, the tokens on each side."""

    prompt: int
    step: int
    kind: str
    tolerated: bool
    expected: str | None = None
    actual: str | None = None
    split: int | None = None
    """The step where the two token paths first differ (None: the same tokens on both sides, or a prompt's length
    only); with the tokens there."""
    split_tokens: tuple[str, str] | None = None

    @property
    def path(self) -> bool:
        """Whether the prompt's generated path (or its end) changed, not only its values."""
        return not self.tolerated and (self.kind in PATH_KINDS or self.split is not None)

    def where(self) -> str:
        """``prompt 0 step 4: ' the' -> ' a'`` (the tokens when the path split); a value drift whose path splits
        later says where: ``prompt 0 step 0 (logprob), path splits at step 7: ' Paris' -> ' the'``."""
        text = f"prompt {self.prompt} step {self.step}"
        if self.kind == "token" and self.expected is not None and self.actual is not None:
            return f"{text}: {quote(self.expected, 16)} -> {quote(self.actual, 16)}"
        text = f"{text} ({self.kind})"
        if self.split is not None and self.split_tokens is not None:
            old, new = self.split_tokens
            text += f", path splits at step {self.split}: {quote(old, 16)} -> {quote(new, 16)}"
        return text


@dataclass(frozen=True)
class Kld:
    """The KLD of the new model on the recorded paths (mean and max over `steps`; `exact` False: lower bounds),
    with per step (prompt, step, kld) and the budget's KLD limits where a picture needs them."""

    mean: float
    max: float
    steps: int
    exact: bool
    per_step: tuple[tuple[int, int, float], ...] = ()
    limits: Mapping[str, float] = field(default_factory=dict)
    prompts: int = 0

    def text(self) -> str:
        bound = "" if self.exact else " (lower bound)"
        return f"KLD mean {number(self.mean, 3)}, max {number(self.max, 3)} over {plural(self.steps, 'step')}{bound}"


def kld_of(steps: Sequence[StepFidelity], *, limits: Mapping[str, float] | None = None, per_step: bool = False) -> Kld:
    """The `Kld` of per-step fidelity figures; `per_step` keeps each step's value (for the report's pictures)."""
    metrics = aggregate(steps)
    kept = tuple((s.prompt, s.step, s.kld) for s in steps) if per_step else ()
    kld_limits = {k: v for k, v in (limits or {}).items() if k.startswith("kld_")}
    exact = bool(steps) and all(s.exact for s in steps)
    prompts = len({s.prompt for s in steps})
    return Kld(metrics["kld_mean"], metrics["kld_max"], len(steps), exact, kept, kld_limits, prompts)


@dataclass(frozen=True)
class Change:
    """What one check found changed: the prompts compared, each diverging prompt's first divergence, one line why
    (the stale reasons, or the headline divergence), and the KLD where it was computed."""

    prompts: int
    divergences: tuple[PromptChange, ...] = ()
    why: str = ""
    kld: Kld | None = None

    @property
    def first(self) -> PromptChange | None:
        """The divergence a reviewer looks at first: the first prompt whose path changed, else the first that is not a
        near tie, else the first."""
        return next(
            (d for d in self.divergences if d.path),
            next((d for d in self.divergences if not d.tolerated), self.divergences[0] if self.divergences else None),
        )

    def counts(self) -> tuple[int, int, int]:
        """(prompts whose path changed, prompts that drifted in value only, near ties)."""
        path = sum(d.path for d in self.divergences)
        ties = sum(d.tolerated for d in self.divergences)
        return path, len(self.divergences) - path - ties, ties

    def line(self) -> str:
        """One line: how many prompts changed and where first (what `genguard review --list` prints)."""
        path, drift, ties = self.counts()
        parts = []
        if path:
            parts.append(f"{path} of {plural(self.prompts, 'prompt')} changed path")
        if drift:
            parts.append(f"{drift} drifted in value")
        if ties:
            parts.append(plural(ties, "near tie"))
        first = self.first
        if first is not None:
            parts.append(f"first at {first.where()}")
        if not self.divergences:
            parts.append(f"{plural(self.prompts, 'prompt')}, same paths")
        if self.kld is not None:
            parts.append(self.kld.text())
        return "; ".join(parts)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "prompts": self.prompts,
            "divergences": [
                {"prompt": d.prompt, "step": d.step, "kind": d.kind, "tolerated": d.tolerated}
                | ({"expected": d.expected, "actual": d.actual} if d.kind == "token" else {})
                | ({"split": d.split, "split_tokens": list(d.split_tokens or ())} if d.split is not None else {})
                for d in self.divergences
            ],
            "why": self.why,
        }
        if self.kld is not None:
            k = self.kld
            out["kld"] = {"mean": k.mean, "max": k.max, "steps": k.steps, "exact": k.exact, "prompts": k.prompts}
            if k.per_step:
                out["kld"]["per_step"] = [list(s) for s in k.per_step]
            if k.limits:
                out["kld"]["limits"] = dict(k.limits)
        return out

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Change:
        divergences = tuple(
            PromptChange(
                int(d.get("prompt", 0)),
                int(d.get("step", 0)),
                str(d.get("kind", "token")),
                bool(d.get("tolerated", False)),
                None if d.get("expected") is None else str(d["expected"]),
                None if d.get("actual") is None else str(d["actual"]),
                None if d.get("split") is None else int(d["split"]),
                _pair(d.get("split_tokens")),
            )
            for d in raw.get("divergences", ())
        )
        kld = None
        k = raw.get("kld")
        if isinstance(k, Mapping):
            per_step = tuple((int(p), int(s), float(v)) for p, s, v in k.get("per_step", ()))
            limits = {str(key): float(v) for key, v in dict(k.get("limits", {})).items()}
            kld = Kld(
                float(k.get("mean", 0.0)),
                float(k.get("max", 0.0)),
                int(k.get("steps", 0)),
                bool(k.get("exact", False)),
                per_step,
                limits,
                int(k.get("prompts", 0)),
            )
        return cls(int(raw.get("prompts", 0)), divergences, str(raw.get("why", "")), kld)


def _pair(raw: object) -> tuple[str, str] | None:
    if isinstance(raw, (list, tuple)) and len(raw) == 2:
        return str(raw[0]), str(raw[1])
    return None


def path_split(old: PromptTrace | None, new: PromptTrace | None) -> int | None:
    """The step where two token paths first differ (None: nowhere, or a side is missing)."""
    if old is None or new is None:
        return None
    return next(
        (n for n, (o, a) in enumerate(zip(old.steps, new.steps, strict=False)) if o.token_id != a.token_id), None
    )


def _split(cmp: Comparison, prompt: int) -> tuple[int | None, tuple[str, str] | None]:
    """Where prompt `prompt`'s two token paths first differ, and the tokens there (None: nowhere)."""
    if prompt >= len(cmp.expected.prompts) or prompt >= len(cmp.actual.prompts):
        return None, None
    old, new = cmp.expected.prompts[prompt], cmp.actual.prompts[prompt]
    n = path_split(old, new)
    return (None, None) if n is None else (n, (old.steps[n].token, new.steps[n].token))


def change_of(cmp: Comparison, kld: Kld | None = None) -> Change:
    """The `Change` of a comparison (prompts compared: those on both sides)."""
    divergences = tuple(
        PromptChange(
            d.prompt_index,
            d.step,
            d.kind,
            d.tolerated,
            d.expected_token if d.kind == "token" else None,
            d.actual_token if d.kind == "token" else None,
            *_split(cmp, d.prompt_index),
        )
        for d in cmp.divergences
    )
    div = headline(cmp)
    if cmp.stale_reasons:
        why = "; ".join(cmp.stale_reasons)
    elif div is not None:
        why = describe(cmp, div)
    else:
        why = ""
    if len(why) > _WHY_WIDTH:
        why = why[: _WHY_WIDTH - 3] + "..."
    prompts = min(len(cmp.expected.prompts), len(cmp.actual.prompts))
    return Change(prompts, divergences, why, kld)


@dataclass
class SuiteChange:
    """What a model change did across a run's checks: prompts compared and how they diverged, where the first
    divergences fall by step, and the KLD of the checks that computed one."""

    checks: int = 0
    changed_checks: int = 0
    prompts: int = 0
    path: int = 0
    drift: int = 0
    ties: int = 0
    by_step: Counter[str] = field(default_factory=Counter)
    splits: Counter[str] = field(default_factory=Counter)
    klds: list[tuple[str, Kld]] = field(default_factory=list)

    def add(self, nodeid: str, change: Change) -> None:
        path, drift, ties = change.counts()
        self.checks += 1
        self.changed_checks += bool(path or drift)
        self.prompts += change.prompts
        self.path, self.drift, self.ties = self.path + path, self.drift + drift, self.ties + ties
        for d in change.divergences:
            if not d.tolerated:
                self.by_step[step_bucket(d.step)] += 1
            if d.path:
                self.splits[step_bucket(d.split if d.split is not None else d.step)] += 1
        if change.kld is not None and change.kld.steps:
            self.klds.append((nodeid, change.kld))

    @property
    def changed(self) -> bool:
        """Whether anything diverged (a near tie counts) or a KLD was computed: then the lines say so."""
        return bool(self.path or self.drift or self.ties or self.klds)

    def lines(self) -> list[str]:
        """The summary's lines (none when nothing diverged and no KLD was computed)."""
        if not self.changed:
            return []
        lines = [
            f"what changed: {self.path} of {plural(self.prompts, 'prompt')} in {plural(self.checks, 'check')} "
            f"changed path, {self.drift} drifted in value only, {plural(self.ties, 'near tie')} tolerated"
        ]
        for counts, what in ((self.by_step, "first divergences"), (self.splits, "paths split")):
            if counts:
                order = sorted(counts, key=lambda b: int(b.split("-")[0].rstrip("+")))
                lines.append(f"{what} by step: " + ", ".join(f"{b}: {counts[b]}" for b in order))
        if self.klds:
            worst_id, worst = max(self.klds, key=lambda item: item[1].max)
            steps = sum(k.steps for _, k in self.klds)
            mean = sum(k.mean * k.steps for _, k in self.klds) / steps if steps else 0.0
            bound = "" if all(k.exact for _, k in self.klds) else " (lower bounds)"
            lines.append(
                f"KLD of the new model on the recorded paths ({plural(len(self.klds), 'check')}: verify() or a "
                f"fidelity budget): mean {number(mean, 3)} over {plural(steps, 'step')}, max {number(worst.max, 3)} "
                f"in {worst_id}{bound}"
            )
        return lines
