"""Fidelity budgets: limits on the metrics of `pytest_genguard.core.fidelity`, the presets named by precision, and
the report that judges a candidate by them (`FidelityReport`, its failure text). Standard library only.

A budget is a `Budget` (frozen; unset limits are not judged), a preset name (``"bf16"``, ``"fp16"``, ``"int8"``,
``"int4"``; for a GGUF file of llama.cpp, the presets of its file type: ``"gguf-q8_0"``, ``"gguf-q6_k"``,
``"gguf-q4_k_m"``, ``"gguf-q4_1"``) or a mapping of limits (``{"kld_mean": 1e-4, "top1_agreement": 0.99}``). The
presets' numbers were measured on real quantizers here (docs/fidelity.md, docs/engines.md, benchmarks/RESULTS.md:
each correct quantization holds its preset with the margin written there, and realistic bugs of the same precision
fail it).

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
from pytest_genguard.core.limits import CALIBRATED_METRICS, LIMITS, PRECISIONS, STATUSES, Budget, calibration_key
from pytest_genguard.core.long_context import Coverage, ProbeInfo, bands
from pytest_genguard.core.text import number, plural, quote
from pytest_genguard.core.trace import GenerationTrace

__all__ = [
    "CALIBRATED_METRICS",
    "GGUF_TYPE_PRESETS",
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

_CAST_RATIOS = (("kld_mean", 2.0), ("kld_p99", 3.0))
"""bf16 and fp16: a correct cast is genguard's own cast (1.00x on every metric, SmolLM2-135M and the tiny llama);
the mildest realistic bug measured, one post-attention norm off by 5% in bf16 on SmolLM2-135M, costs 2.68x on the
mean and 4.41x on p99 (docs/fidelity.md)."""
_QUANT_RATIOS = (("kld_mean", 4.0), ("kld_p99", 6.0))
"""int8 and int4: quantizers differ from genguard's round-to-nearest by method (torchao's int8 weight-only costs
1.13x on SmolLM2-135M but 2.02x the mean and 3.01x p99 on the tiny llama; optimum-quanto's int4 0.58-0.82x); the
realistic bugs cost 10x and more (one layer's down_proj in int4 per tensor: 10.7-35x; the output head int4 per
tensor on the tiny llama; torch's quantize_dynamic on SmolLM2-135M: 504x)."""

_GGUF_FIXED = "measured on SmolLM2-135M-Instruct alone (docs/engines.md)"
_GGUF_Q8_0 = (("kld_mean", 4.0), ("kld_p99", 8.0))
"""gguf-q8_0 (x the reference's own int8): llama.cpp's Q8_0 of SmolLM2-135M-Instruct costs 1.40x the mean and 3.05x
p99 of genguard's int8 (margins 2.9x, 2.6x); one FFN norm weight x1.25 costs 15.7x / 48.1x (3.9x, 6.0x outside), the
rope base 1e5 -> 1e4 31.5x / 64.9x (docs/engines.md, benchmarks/gguf_presets.py)."""
_GGUF_Q6_K = (("kld_mean", 8.0), ("kld_p99", 16.0))
"""gguf-q6_k: Q6_K costs 3.09x / 5.83x (margins 2.6x, 2.7x); the norm bug 18.3x / 57.6x (2.3x, 3.6x outside), the
rope bug 62.9x / 129x."""
_GGUF_Q4_K_M = (("kld_mean", 25.0), ("kld_p99", 35.0))
"""gguf-q4_k_m: Q4_K_M costs 13.5x / 14.7x (margins 1.85x, 2.4x); the norm bug 42.7x / 77.8x (1.7x, 2.2x outside),
the rope bug 52.2x / 108x. On a copy whose weights are off Q4_1's grid (benchmarks/gguf_presets.py --off-grid 0.1):
10.8x / 6.5x, the norm bug 28.9x (1.16x outside), the rope bug 40.7x."""
_GGUF_Q4_1 = (("kld_mean", 50.0), ("kld_p99", 35.0))
"""gguf-q4_1: SmolLM2's weights are its shipped Q4_1 file dequantized, so there Q4_1 costs 1.27x / 2.63x only; on the
off-grid copy a correct Q4_1 costs 31.2x / 13.8x (margins 1.6x, 2.5x), as llama.cpp's scoreboard puts Q4_1 above
Q4_K_M (2.3x on Llama 3 8B). On SmolLM2 the norm bug (17.1x / 47.9x) and the rope bug (31.1x / 62.8x) fail it by
p99 (1.37x, 1.8x outside); on the off-grid copy no bug measured is outside it, and its traces compare 5 of 96 steps
(its exact KLD is 57x its int8's): the least founded preset (docs/engines.md)."""

PRESETS: dict[str, Budget] = {
    # Relative (docs/fidelity.md, benchmarks/RESULTS.md): multiples of the reference model's own conversion to the
    # precision, measured between the worst correct copy and the mildest realistic bug on SmolLM2-135M-Instruct and
    # the pinned tiny llama. The fixed limits apply to a reference without calibration figures: measured on the tiny
    # llama and the 26M-parameter llama (weight-only int8; "int4" also holds torch's quantize_dynamic there).
    "bf16": Budget(kld_mean=1e-4, kld_p99=3e-3, kld_max=4e-3, name="bf16", ratios=_CAST_RATIOS, precision="bf16"),
    "fp16": Budget(kld_mean=1e-5, kld_p99=2e-4, kld_max=3e-4, name="fp16", ratios=_CAST_RATIOS, precision="fp16"),
    "int8": Budget(kld_mean=2e-4, kld_p99=3e-3, kld_max=4e-3, name="int8", ratios=_QUANT_RATIOS, precision="int8"),
    "int4": Budget(kld_mean=1.5e-1, kld_p90=5e-2, name="int4", ratios=_QUANT_RATIOS, precision="int4"),
    # llama.cpp's GGUF file types, as llama.cpp's own tools make them (convert_hf_to_gguf.py, llama-quantize), run with
    # its f16 KV cache: multiples of the reference's own int8 conversion (docs/engines.md). The fixed limits are the
    # same multiples of SmolLM2-135M-Instruct's int8 (trace bounds: mean 1.38e-3, p99 6.15e-3).
    "gguf-q8_0": Budget(
        kld_mean=5e-3, kld_p99=5e-2, name="gguf-q8_0", ratios=_GGUF_Q8_0, precision="int8", fixed_basis=_GGUF_FIXED
    ),
    "gguf-q6_k": Budget(
        kld_mean=1e-2, kld_p99=1e-1, name="gguf-q6_k", ratios=_GGUF_Q6_K, precision="int8", fixed_basis=_GGUF_FIXED
    ),
    "gguf-q4_k_m": Budget(
        kld_mean=3.5e-2,
        kld_p99=2e-1,
        name="gguf-q4_k_m",
        ratios=_GGUF_Q4_K_M,
        precision="int8",
        fixed_basis=_GGUF_FIXED,
    ),
    "gguf-q4_1": Budget(
        kld_mean=7e-2, kld_p99=2e-1, name="gguf-q4_1", ratios=_GGUF_Q4_1, precision="int8", fixed_basis=_GGUF_FIXED
    ),
}

GGUF_TYPE_PRESETS: dict[str, str] = {
    "BF16": "bf16",
    "F16": "fp16",
    "Q8_0": "gguf-q8_0",
    "Q6_K": "gguf-q6_k",
    "Q4_K_M": "gguf-q4_k_m",
    "Q4_1": "gguf-q4_1",
}
"""The preset that judges a GGUF of each llama.cpp file type (``general.file_type``) when no budget is named
(``genguard check-gguf``); F32 is judged by the float32 rule, other types need a budget."""


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

    @property
    def holds(self) -> bool:
        return not self.violations and (self.probe is None or self.probe.holds)

    @property
    def own_status(self) -> str:
        """The snapshot's status alone: ``"within"`` (holds, every step exact), ``"outside"`` (a limit broken:
        proven, since a lower bound above a limit is above it) or ``"unproven"`` (holds on lower bounds only)."""
        if self.violations:
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
        names += [f"long probe {v.key}" for v in (self.probe.violations if self.probe is not None else ())]
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
        """The long probe's own lines: its verdict and figures, its positions in bands, its broken limits."""
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
        limit = None if probe.budget is None else probe.budget.kld_mean
        window = None if info is None else info.sliding_window
        shown = bands(probe.steps, window)
        start = next((b for b in shown if limit is not None and b.kld_mean > limit), None)
        for band in shown:
            lines.append(f"    {band.line(limit)}" + ("  <- the divergence starts here" if band is start else ""))
        for v in probe.violations:
            op = ">" if LIMITS[v.key] == "max" else "<"
            at = "" if v.worst is None else f" (worst at position {v.worst.step})"
            lines.append(f"    {v.key} = {number(v.value)} {op} limit {v.limit:g}{at}")
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
            out["probe"] = {
                "status": self.probe.status,
                "metrics": dict(self.probe.metrics),
                "limits": None if self.probe.budget is None else self.probe.budget.limits(),
                "violations": [v.key for v in self.probe.violations],
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
