"""Fidelity budgets: limits on the metrics of `pytest_genguard.core.fidelity`, the presets named by precision, and
the report that judges a candidate by them (`FidelityReport`, its failure text). Standard library only.

A budget is a `Budget` (frozen; unset limits are not judged), a preset name (``"bf16"``, ``"fp16"``, ``"int8"``,
``"int4"``; for a GGUF file of llama.cpp, the presets of its file type: ``"gguf-q8_0"``, ``"gguf-q6_k"``,
``"gguf-q4_k_m"``, ``"gguf-q4_1"``; for a file lossy in its KV cache alone, ``"kv-f16"`` ...) or a mapping of limits
(``{"kld_mean": 1e-4, "top1_agreement": 0.99}``). The presets (`core.presets`) were measured on real quantizers here
(docs/fidelity.md, docs/engines.md, benchmarks/RESULTS.md: each correct quantization holds its preset with the margin
written there, and realistic bugs of the same precision fail it).

With a lower bound (a reference trace without its model), a KLD above its limit is proven; a KLD within it is not
(the true value may be higher): the report says so, with how much of the reference's mass the recorded top-k covered.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_genguard.core.fidelity import StepFidelity, aggregate, trace_fidelity
from pytest_genguard.core.limits import (
    CALIBRATED_METRICS,
    CALIBRATIONS,
    DEFAULT_CALIBRATION,
    KV_CACHE_PRECISIONS,
    LIMITS,
    PRECISIONS,
    STATUSES,
    Budget,
    calibration_key,
)
from pytest_genguard.core.long_context import Band, BandRule, Coverage, ProbeInfo, bands
from pytest_genguard.core.presets import GGUF_TYPE_PRESETS, KV_CACHE_PRESETS, KV_CACHE_TYPES, PRESETS
from pytest_genguard.core.text import number, plural, quote
from pytest_genguard.core.trace import GenerationTrace

__all__ = [
    "CALIBRATED_METRICS",
    "CALIBRATIONS",
    "DEFAULT_CALIBRATION",
    "GGUF_TYPE_PRESETS",
    "KV_CACHE_PRECISIONS",
    "KV_CACHE_PRESETS",
    "KV_CACHE_TYPES",
    "LIMITS",
    "PRECISIONS",
    "PRESETS",
    "STATUSES",
    "Budget",
    "FidelityReport",
    "Violation",
    "budget_of",
    "calibration_key",
    "parse_budget",
    "traces_report",
    "worst_status",
]


def budget_of(budget: str | Mapping[str, Any] | Budget | None, *, where: str = "fidelity()") -> Budget | None:
    """A budget from a preset name, a mapping of limits or a `Budget` (None stays None); a clear ValueError for an
    unknown preset or limit."""
    if budget is None or isinstance(budget, Budget):
        return budget
    if isinstance(budget, str):
        if budget not in PRESETS:
            raise ValueError(
                f"{where}: unknown fidelity budget {budget!r}; the presets are {', '.join(map(repr, PRESETS))}, "
                f"or pass a mapping of limits ({', '.join(LIMITS)})."
            )
        return PRESETS[budget]
    if isinstance(budget, Mapping):
        unknown = [k for k in budget if k not in LIMITS]
        if unknown:
            raise ValueError(
                f"{where}: unknown fidelity limit {', '.join(map(repr, unknown))}; accepted: {', '.join(LIMITS)}."
            )
        if not budget:
            raise ValueError(f"{where}: the fidelity budget mapping is empty; set at least one of {', '.join(LIMITS)}.")
        try:
            return Budget(**{str(k): v for k, v in budget.items()})
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
    raise TypeError(
        f"{where}: budget must be a preset name ({', '.join(PRESETS)}), a mapping of limits or a Budget, "
        f"got {type(budget).__name__}."
    )


def parse_budget(text: str, *, where: str = "--budget") -> Budget:
    """A budget from command-line text: a preset name (``int8``) or ``KEY=VALUE,...`` (``kld_mean=1e-4,flips=0``)."""
    text = text.strip()
    if "=" not in text:
        parsed = budget_of(text, where=where)
        assert parsed is not None
        return parsed
    limits: dict[str, float] = {}
    for item in text.split(","):
        key, sep, value = (part.strip() for part in item.partition("="))
        if not sep or not key:
            raise ValueError(f"{where}: {item.strip()!r} is not KEY=VALUE (e.g. kld_mean=1e-4,top1_agreement=0.99).")
        try:
            limits[key] = float(value)
        except ValueError:
            raise ValueError(f"{where}: {key}={value!r} is not a number (e.g. {key}=1e-4).") from None
    parsed = budget_of(limits, where=where)
    assert parsed is not None
    return parsed


@dataclass(frozen=True)
class Violation:
    """A limit the candidate did not keep, and the step that shows it most."""

    key: str
    value: float
    limit: float
    worst: StepFidelity | None


def _worst(key: str, steps: Sequence[StepFidelity]) -> StepFidelity | None:
    """The step that shows a metric's failure most: the largest KLD, |Δp|, or the first step that disagrees."""
    if not steps:
        return None
    if key.startswith("kld"):
        return max(steps, key=lambda s: s.kld)
    if key.endswith("delta_p"):
        return max(steps, key=lambda s: abs(s.delta_p or 0.0))
    if key == "flips":
        return next((s for s in steps if s.flipped), None)
    return next((s for s in steps if not s.same_top1), None)


def worst_status(statuses: Sequence[str]) -> str:
    """The worst of `FidelityReport.status` values: outside, then unproven, then within."""
    for status in ("outside", "unproven"):
        if status in statuses:
            return status
    return "within"


_REGENERATED = (
    "the candidate generated its own path (it was not teacher forced: llama-server, which scores no given sequence, "
    "or a trace of its own decoding) and left the reference's at {where}; after a departure the contexts differ"
)


@dataclass(frozen=True)
class FidelityReport:
    """A candidate judged against a reference: `.metrics` (see `core.fidelity.METRIC_KEYS`), `.holds` (within the
    budget; True without one), `.exact` (False: KLD figures are lower bounds), `.status` (within, outside, unproven:
    what a gate exits on, `core.gate`), and ``str()`` explaining it. `probe` is the long probe's own report (a built-in
    text of thousands of tokens through both sides, exact), judged with the snapshot: the worse of the two decides."""

    steps: tuple[StepFidelity, ...]
    budget: Budget | None = None
    skipped: int = 0
    """Reference steps that could not be compared (after a regenerated candidate left the path)."""
    token_texts: Mapping[int, str] | None = None
    prompts: tuple[str, ...] = ()
    """The reference's prompts, to name the worst step's prompt by its text."""
    skipped_why: str = ""
    """Why `skipped` steps were not compared (said on the report's line)."""
    coverage: Coverage | None = None
    probe: FidelityReport | None = None
    probe_info: ProbeInfo | None = None
    band_rule: BandRule | None = None
    """The long probe's own report is judged band by band too (`core.long_context.BandRule`); None elsewhere."""

    @property
    def exact(self) -> bool:
        return bool(self.steps) and all(s.exact for s in self.steps)

    @functools.cached_property
    def metrics(self) -> Mapping[str, float]:
        """The aggregates (keys: `core.fidelity.METRIC_KEYS`), read-only."""
        return types.MappingProxyType(aggregate(self.steps))

    @functools.cached_property
    def violations(self) -> tuple[Violation, ...]:
        """The snapshot's broken limits (the probe's are `probe.violations`)."""
        if self.budget is None:
            return ()
        metrics = self.metrics
        out = []
        for key, limit in self.budget.limits().items():
            value = metrics[key]
            bad = value > limit if LIMITS[key] == "max" else value < limit
            if bad:
                out.append(Violation(key, value, limit, _worst(key, self.steps)))
        return tuple(out)

    @functools.cached_property
    def bands(self) -> tuple[Band, ...]:
        """The probe's positions in bands (`core.long_context.bands`); none for a report without a `band_rule`."""
        return () if self.band_rule is None else bands(self.steps, self.band_rule.sliding_window)

    def band_limit(self, band: Band) -> float | None:
        """`band`'s KLD mean limit (None: not judged)."""
        default = None if self.budget is None else self.budget.kld_mean
        return None if self.band_rule is None else self.band_rule.limit(band, default)

    @functools.cached_property
    def band_violations(self) -> tuple[tuple[Band, float], ...]:
        """The bands whose KLD mean breaks their limit, and the limit: each fails the probe on its own."""
        limits = ((band, self.band_limit(band)) for band in self.bands)
        return tuple((band, limit) for band, limit in limits if limit is not None and band.kld_mean > limit)

    @property
    def holds(self) -> bool:
        return not self.violations and not self.band_violations and (self.probe is None or self.probe.holds)

    @property
    def own_status(self) -> str:
        """The snapshot's status alone: ``"within"`` (holds, every step exact), ``"outside"`` (a limit broken, or a
        band's: proven, since a lower bound above a limit is above it) or ``"unproven"`` (holds on lower bounds
        only)."""
        if self.violations or self.band_violations:
            return "outside"
        if self.exact:
            return "within"
        alike = self.budget is not None and self.budget.alike and bool(self.steps)
        return "within" if alike and all(s.complete for s in self.steps) else "unproven"

    @property
    def status(self) -> str:
        """The worse of the snapshot's status and the long probe's (`STATUSES`): what a gate exits on."""
        return worst_status([self.own_status] + ([] if self.probe is None else [self.probe.status]))

    def __bool__(self) -> bool:
        return self.holds

    def _token(self, token_id: int) -> str:
        text = (self.token_texts or {}).get(token_id)
        return f"{token_id}" if text is None else f"{token_id} {text!r}"

    def _top(self, top: tuple[tuple[int, float], ...]) -> str:
        return ", ".join(f"{self._token(i)} {number(lp)}" for i, lp in top) or "(not recorded)"

    def _step_lines(self, step: StepFidelity) -> list[str]:
        dp = "unknown" if step.delta_p is None else number(step.delta_p)
        rank = "beyond the candidate's top-k" if step.rank is None else str(step.rank)
        prompt = f" {quote(self.prompts[step.prompt], 40)}" if step.prompt < len(self.prompts) else ""
        token = self._token(step.token_id)
        return [
            f"  worst step: prompt {step.prompt}{prompt} step {step.step} (reference token {token}): "
            f"KLD {number(step.kld)}{'' if step.exact else ' (lower bound)'}, Δp {dp}, rank under the candidate {rank}",
            f"    reference top-k: {self._top(step.reference_top)}",
            f"    candidate top-k: {self._top(step.candidate_top)}",
        ]

    def _head(self) -> str:
        n = int(self.metrics["steps"])
        kind = "exact (full vocabulary, float64)" if self.exact else "KLD is a LOWER BOUND (recorded top-k + rest)"
        if self.budget is None:
            return f"fidelity: {plural(n, 'step')}, {kind}"
        if self.status == "unproven":
            head = f"fidelity UNPROVEN for budget {self.budget}: holds on lower bounds only"
            return f"{head}; {plural(n, 'step')}, {kind}"
        if self.holds:
            return f"fidelity within budget {self.budget}: {plural(n, 'step')}, {kind}"
        names = [v.key for v in self.violations]
        if self.probe is not None:
            names += [f"long probe {v.key}" for v in self.probe.violations]
            names += [f"long probe {band.name}" for band, _ in self.probe.band_violations[:1]]
        return f"fidelity OUTSIDE budget {self.budget.name}: {', '.join(names)}; {plural(n, 'step')}, {kind}"

    def _figures(self) -> list[str]:
        m = self.metrics
        n = int(m["steps"])
        return [
            f"  KLD mean {number(m['kld_mean'])} ± {number(m['kld_stderr'])}, median {number(m['kld_median'])}, "
            f"p90 {number(m['kld_p90'])}, p99 {number(m['kld_p99'])}, p99.9 {number(m['kld_p999'])}, "
            f"max {number(m['kld_max'])}",
            f"  same top-1 {100 * m['top1_agreement']:.2f}%, flips {int(m['flips'])}, "
            f"RMS Δp {number(m['rms_delta_p'])}, max |Δp| {number(m['max_abs_delta_p'])}, "
            f"on the reference path {int(m['on_path_steps'])}/{n} steps",
        ]

    def _bound_lines(self) -> list[str]:
        m = self.metrics
        covered = (
            f"  the recorded top-k covered {100 * m['covered_mean']:.2f}% of the reference's probability mass on "
            f"average (least {100 * m['covered_min']:.2f}%)"
        )
        if self.exact:
            return []
        if self.own_status == "within":
            return [
                f"{covered}; within like for like: the candidate's lower bounds against the reference model's own "
                "conversion's, measured over the same tokens at every step"
            ]
        unproven = "; within budget is not proven" if self.budget is not None and not self.violations else ""
        return [
            f"{covered}: the true KLD may be higher{unproven}. Pass reference_model= to fidelity() for exact metrics, "
            "or record with a larger top_k."
        ]

    def _violation_lines(self) -> list[str]:
        lines = []
        shown: set[tuple[int, int]] = set()
        for v in self.violations:
            op = ">" if LIMITS[v.key] == "max" else "<"
            lines.append(f"  {v.key} = {number(v.value)} {op} limit {v.limit:g}")
            if v.worst is None:
                continue
            where = (v.worst.prompt, v.worst.step)
            if where in shown:
                lines.append(f"  worst step: prompt {where[0]} step {where[1]} (above)")
            else:
                shown.add(where)
                lines += self._step_lines(v.worst)
        return lines

    def probe_lines(self) -> list[str]:
        """The long probe's own lines: its verdict and figures, its positions in bands (each judged), its broken
        limits."""
        probe, info = self.probe, self.probe_info
        if probe is None:
            return []
        m = probe.metrics
        what = f"{info.tokens} tokens of {info.text}" if info is not None else f"{int(m['steps'])} positions"
        verdict = {"within": "within", "outside": "OUTSIDE", "unproven": "UNPROVEN"}[probe.status]
        lines = [
            f"  long probe {verdict}: {what}, teacher forced through both sides, exact (full vocabulary, float64): "
            f"KLD mean {number(m['kld_mean'])}, p99 {number(m['kld_p99'])}, max {number(m['kld_max'])}, "
            f"same top-1 {100 * m['top1_agreement']:.2f}%, flips {int(m['flips'])}"
        ]
        if info is not None and info.basis:
            lines.append(f"    limits: {info.basis}")
        if probe.band_rule is not None and probe.band_rule.basis:
            lines.append(f"    band limits: {probe.band_rule.basis}")
        start = probe.band_violations[0][0] if probe.band_violations else None
        for band in probe.bands:
            mark = "  <- the divergence starts here" if band is start else ""
            lines.append(f"    {band.line(probe.band_limit(band))}{mark}")
        for v in probe.violations:
            op = ">" if LIMITS[v.key] == "max" else "<"
            at = "" if v.worst is None else f" (worst at position {v.worst.step})"
            lines.append(f"    {v.key} = {number(v.value)} {op} limit {v.limit:g}{at}")
        if start is not None:
            lines.append(
                f"    {plural(len(probe.band_violations), 'band')} above its KLD limit, from {start.name}: a bug that "
                "lives past some position (a rope base, rope scaling, a sliding window) is judged where it lives"
            )
        return lines

    def __str__(self) -> str:
        lines = [
            self._head(),
            *([f"  limits: {self.budget.basis}"] if self.budget is not None and self.budget.basis else []),
            *self._figures(),
            *self._bound_lines(),
        ]
        if self.skipped:
            why = self.skipped_why or "the candidate's path does not cover them"
            lines.append(f"  {plural(self.skipped, 'reference step')} not compared: {why}")
        lines += self._violation_lines()
        if self.coverage is not None:
            lines.append("  " + self.coverage.line())
        lines += self.probe_lines()
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """The report as JSON data (for ``genguard fidelity --json``)."""
        out: dict[str, Any] = {
            "holds": self.holds,
            "status": self.status,
            "exact": self.exact,
            "budget": None if self.budget is None else {"name": self.budget.name, **self.budget.limits()},
            "metrics": dict(self.metrics),
            "skipped": self.skipped,
            "violations": [
                {
                    "key": v.key,
                    "value": v.value,
                    "limit": v.limit,
                    "worst": None if v.worst is None else {"prompt": v.worst.prompt, "step": v.worst.step},
                }
                for v in self.violations
            ],
            "per_step": [
                {"prompt": s.prompt, "step": s.step, "kld": s.kld, "delta_p": s.delta_p, "same_top1": s.same_top1}
                for s in self.steps
            ],
        }
        if self.coverage is not None:
            c = self.coverage
            out["coverage"] = {"longest": c.longest, "sliding_window": c.sliding_window, "context": c.context}
        if self.probe is not None:
            probe = self.probe
            out["probe"] = {
                "status": probe.status,
                "metrics": dict(probe.metrics),
                "limits": None if probe.budget is None else probe.budget.limits(),
                "violations": [v.key for v in probe.violations],
                "bands": [
                    {
                        "start": b.start,
                        "end": b.end,
                        "steps": b.steps,
                        "kld_mean": b.kld_mean,
                        "limit": probe.band_limit(b),
                        "outside": any(b is v for v, _ in probe.band_violations),
                    }
                    for b in probe.bands
                ],
            }
        return out


def traces_report(reference: GenerationTrace, candidate: GenerationTrace, budget: Budget | None) -> FidelityReport:
    """The report on a candidate trace against a reference trace alone: the KLD lower bound of
    `core.fidelity.trace_fidelity` (``genguard fidelity``, the fidelity marker's ``trace == genguard_snapshot``, a
    server). A teacher-forced candidate is compared at every step; a regenerated one up to its first departure from
    each path, and the report says where."""
    steps, skipped, departures = trace_fidelity(reference, candidate)
    texts = {**candidate.token_texts, **reference.token_texts}
    texts.update({s.token_id: s.token for t in (reference, candidate) for p in t.prompts for s in p.steps})
    prompts = tuple(p.prompt for p in reference.prompts)
    limits = None if budget is None else budget.calibrated(reference.calibration, bounded=True)
    where = ", ".join(f"prompt {b} step {t}" for b, t in departures[:4]) + (", ..." if len(departures) > 4 else "")
    why = _REGENERATED.format(where=where) if departures else ""
    return FidelityReport(tuple(steps), limits, skipped=skipped, token_texts=texts, prompts=prompts, skipped_why=why)
