"""What a fidelity budget is: its limits (`LIMITS`, `Budget`), and how a preset's relative limits are scaled by a
reference's calibration (`Budget.calibrated`, `calibration_key`). Standard library only; `pytest_genguard.core.budget`
holds the presets, the parsing and the report, and re-exports these names (callers import them from there).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CALIBRATED_METRICS",
    "CALIBRATIONS",
    "DEFAULT_CALIBRATION",
    "KV_CACHE_PRECISIONS",
    "LIMITS",
    "PRECISIONS",
    "STATUSES",
    "Budget",
    "calibration_key",
]

LIMITS: dict[str, str] = {
    "kld_mean": "max",
    "kld_median": "max",
    "kld_p90": "max",
    "kld_p99": "max",
    "kld_p999": "max",
    "kld_max": "max",
    "top1_agreement": "min",
    "rms_delta_p": "max",
    "max_abs_delta_p": "max",
    "flips": "max",
    "on_path_share": "min",
}
"""Every limit a budget may set, and whether it is a maximum or a minimum of its metric."""

STATUSES = ("within", "outside", "unproven")
"""`FidelityReport.status`'s values: proven within, proven outside, or within on lower bounds only (proves nothing)."""


@dataclass(frozen=True)
class Budget:
    """Limits on fidelity metrics (None: not judged). KLD in nats, KL(reference || candidate); `top1_agreement`
    and `on_path_share` are minimum shares (0-1), `flips` a maximum count."""

    kld_mean: float | None = None
    kld_median: float | None = None
    kld_p90: float | None = None
    kld_p99: float | None = None
    kld_p999: float | None = None
    kld_max: float | None = None
    top1_agreement: float | None = None
    rms_delta_p: float | None = None
    max_abs_delta_p: float | None = None
    flips: float | None = None
    on_path_share: float | None = None
    name: str = "custom"
    """The preset's name, or "custom"."""
    ratios: tuple[tuple[str, float], ...] = ()
    """A preset's limits as multiples of what genguard's own conversion of the reference model to `precision` costs
    (its calibration: `pytest_genguard.hf.fidelity.calibrate`); the fixed limits above apply where none is known."""
    precision: str | None = None
    basis: str = ""
    """How the limits were set, for the report ("2x the reference model's own bf16 cast", "fixed limits ...")."""
    fixed_basis: str = "measured on tiny models, they are too tight for most real ones"
    """What the fixed limits were measured on, for the report when they apply."""
    alike: bool = False
    """The limits scale lower bounds of the calibration copy measured as the candidate's are (over the reference's
    recorded top-k): a candidate's bound within them is within, like for like (`FidelityReport.status`)."""

    def __post_init__(self) -> None:
        for key in LIMITS:
            value = getattr(self, key)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"fidelity budget: {key}={value!r} must be a finite number >= 0 (e.g. {key}=1e-4).")
            if LIMITS[key] == "min" and value > 1:
                raise ValueError(f"fidelity budget: {key}={value!r} is a share between 0 and 1 (e.g. {key}=0.99).")
            object.__setattr__(self, key, float(value))

    def calibrated(self, calibration: Mapping[str, Any] | None, *, bounded: bool = False) -> Budget:
        """The limits for a reference whose calibration figures are `calibration` (``{"bf16.kld_mean": ...}``):
        each ratio times the figure it scales, where the reference has one; the fixed limits otherwise (the report
        says which). `bounded`: the candidate will be measured by lower bounds over the reference's recorded top-k;
        the calibration's own bounds, measured the same way (``"bf16.bound.kld_mean"``), are scaled where it has
        them, so that a bound within the limits proves something (`alike`)."""
        if not self.ratios or self.precision is None:
            return self
        bounds = _figures(calibration, f"{self.precision}.bound", self.ratios) if bounded else None
        figures = bounds or _figures(calibration, self.precision, self.ratios)
        if figures is None:
            return dataclasses.replace(
                self,
                ratios=(),
                basis=f"fixed limits: the reference has no calibration figures for {self.precision} (store them "
                "with pytest_genguard.calibrate(model, tokenizer, trace), or pass reference_model= to fidelity()); "
                f"{self.fixed_basis}",
            )
        limits = {key: max(ratio * figures[key], _FLOORS.get(key, 0.0)) for key, ratio in self.ratios}
        shown = ", ".join(f"{ratio:g}x {key} {figures[key]:.3g}" for key, ratio in self.ratios)
        fields: dict[str, Any] = {key: limits.get(key) for key in LIMITS}
        measured = ", both as lower bounds over the reference's recorded top-k" if bounds else ""
        basis = f"relative to the reference model's own {self.precision} conversion{measured} ({shown})"
        return dataclasses.replace(self, **fields, ratios=(), basis=basis, alike=bounds is not None)

    def limits(self) -> dict[str, float]:
        """The limits set, in `LIMITS` order."""
        return {key: value for key in LIMITS if (value := getattr(self, key)) is not None}

    def __str__(self) -> str:
        shown = ", ".join(
            f"{key} {'<=' if LIMITS[key] == 'max' else '>='} {value:g}" for key, value in self.limits().items()
        )
        return f"{self.name} ({shown})" + (f"; {self.basis}" if self.basis else "")


def _figures(
    calibration: Mapping[str, Any] | None, prefix: str, ratios: tuple[tuple[str, float], ...]
) -> dict[str, float] | None:
    """The calibration's figure under `prefix` (``"bf16"``, ``"bf16.bound"``) for every metric `ratios` scale; None
    where one is missing."""
    raw = {key: (calibration or {}).get(calibration_key(prefix, key)) for key, _ in ratios}
    figures = {k: float(v) for k, v in raw.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    return figures if len(figures) == len(raw) else None


PRECISIONS = ("bf16", "fp16", "int8", "int4")
"""The precisions genguard converts a whole reference model to itself (`pytest_genguard.hf.fidelity.calibrate`)."""

KV_CACHE_PRECISIONS = ("kv-f16", "kv-f32", "kv-bf16", "kv-q8_0", "kv-q4_0")
"""A copy lossy where llama.cpp's arithmetic on float32 weights is: the reference model's attention computed as
llama.cpp's over a KV cache of that type, and a tanh GELU through ggml's float16 table, its weights untouched
(`pytest_genguard.hf.kv_cache_copies`): the scale of an F32 file run with that cache."""

CALIBRATIONS = (*PRECISIONS, *KV_CACHE_PRECISIONS)
"""Every calibration `calibrate()` can store."""

DEFAULT_CALIBRATION = (*PRECISIONS, "kv-f16")
"""What `calibrate()` stores by default: the whole-model conversions and llama.cpp's default (f16) KV cache."""

CALIBRATED_METRICS = ("kld_mean", "kld_p90", "kld_p99", "kld_max", "top1_agreement")
"""The metrics a calibration stores per precision."""


def calibration_key(precision: str, metric: str) -> str:
    """The key of a calibration figure: ``"int8.kld_mean"``."""
    return f"{precision}.{metric}"


_FLOORS = {"kld_mean": 1e-9, "kld_p90": 1e-9, "kld_p99": 1e-9, "kld_max": 1e-9}
"""A relative limit never falls below these: a reference conversion that costs nothing (a float32 model stored in
bfloat16 already) would otherwise allow nothing at all."""
