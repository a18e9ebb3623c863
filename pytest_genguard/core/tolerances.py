"""Tolerances: how far two traces may drift and still be the same behaviour, the defaults per dtype, the training
tolerance, and the per-test overrides (ini options, the `genguard` marker, `--atol` of the CLI). Standard library only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:  # (only its dtype is read: the plugin's settings import this module at start-up)
    from pytest_genguard.core.trace import GenerationTrace

__all__ = [
    "BFLOAT16",
    "EXACT",
    "FLOAT16",
    "FLOAT32",
    "TRAINING",
    "TRAINING_LOSS",
    "Overrides",
    "ToleranceArgs",
    "Tolerances",
    "default_tolerances",
    "resolve",
    "same",
    "tolerances_for",
]


class ToleranceArgs(TypedDict, total=False):
    """The tolerance keywords of `compare()` and `verify()`: `tolerances` replaces the dtype default as the base,
    `atol`/`rtol`/`tie_tol` override single fields of it."""

    atol: float | None
    rtol: float | None
    tie_tol: float | None
    tolerances: Tolerances | None


@dataclass(frozen=True)
class Tolerances:
    """How far two traces may drift and still count as the same behaviour.

    `atol`/`rtol` bound each logprob/score difference: ``|a - b| <= atol + rtol * max(|a|, |b|)`` (symmetric, unlike
    numpy's ``rtol * |b|``, so that ``compare(a, b)`` and ``compare(b, a)`` agree). `tie_tol` bounds the logprob gap
    between the two tokens at a split for it to count as a near tie; ``tie_tol=0`` tolerates no split at all.
    """

    atol: float
    rtol: float
    tie_tol: float

    def __post_init__(self) -> None:
        for name in ("atol", "rtol", "tie_tol"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise ValueError(f"Tolerances: {name} must be a number >= 0, got {value!r}")

    def replace(
        self, *, atol: float | None = None, rtol: float | None = None, tie_tol: float | None = None
    ) -> Tolerances:
        """A copy with the given fields overridden (None keeps the current value)."""
        return Tolerances(
            atol=self.atol if atol is None else atol,
            rtol=self.rtol if rtol is None else rtol,
            tie_tol=self.tie_tol if tie_tol is None else tie_tol,
        )

    def loosest(self, other: Tolerances) -> Tolerances:
        """Field-wise maximum: the tolerance for comparing traces recorded in two different dtypes."""
        return Tolerances(max(self.atol, other.atol), max(self.rtol, other.rtol), max(self.tie_tol, other.tie_tol))

    def allowed(self, a: float, b: float) -> float:
        """The largest |a - b| accepted for this pair of finite values."""
        return self.atol + self.rtol * max(abs(a), abs(b))

    def close(self, a: float, b: float) -> bool:
        """Whether two values agree: equal (NaN equals NaN, inf equals inf), or finite and within tolerance."""
        if same(a, b):
            return True
        if not (math.isfinite(a) and math.isfinite(b)):
            return False
        return abs(a - b) <= self.allowed(a, b)

    def __str__(self) -> str:
        return f"atol {self.atol:g}, rtol {self.rtol:g}, tie_tol {self.tie_tol:g}"


EXACT = Tolerances(0.0, 0.0, 0.0)
"""Bitwise comparison, for reruns within one environment (deterministic settings on one machine)."""

FLOAT32 = Tolerances(atol=1e-6, rtol=1e-4, tie_tol=1e-3)
FLOAT16 = Tolerances(atol=5e-3, rtol=5e-3, tie_tol=0.06)
BFLOAT16 = Tolerances(atol=1e-2, rtol=1e-2, tie_tol=0.1)

TRAINING = Tolerances(atol=0.02, rtol=0.1, tie_tol=0.5)
"""For traces recorded *during training* (a recorder history), compared across machines: training amplifies the
rounding of the CPU's kernels. Measured (torch 2.13, transformers 5.23): genguard's default recipes, seeds 0-2,
trained under the AVX2 and the scalar kernel sets, keep the same token paths at every checkpoint with logprobs
apart by at most 0.13 in absolute and 2.5% in relative terms (t5; gpt2 0.068 / 2.5%; llama 0.001 / 0.02%). rtol
0.1 is four times the worst relative drift, atol 0.02 covers logprobs near 0, and tie_tol follows the dtype rule
(twice the band of a logprob near -5, rounded down: a split that close is rounding, not training)."""
TRAINING_LOSS = Tolerances(atol=1e-3, rtol=2e-2, tie_tol=0.0)
"""For the training loss a recorder history logs: measured apart by at most 4.4e-4 absolute and 0.36% relative
under the same kernel sets (2x and 5x margins). Also covers transformers 4.5x logging the loss rounded to 4 digits."""

_DTYPE_ALIASES: dict[str, Tolerances] = {
    **dict.fromkeys(("float32", "fp32", "f32", "float", "single", "float64", "fp64", "f64", "double"), FLOAT32),
    **dict.fromkeys(("float16", "fp16", "f16", "half"), FLOAT16),
    **dict.fromkeys(("bfloat16", "bf16"), BFLOAT16),
}


def tolerances_for(dtype: str | None) -> Tolerances:
    """Default tolerances for traces recorded in `dtype` (HF's eager-vs-sdpa figures for atol/rtol).

    float32 (also None, float64): atol 1e-6, rtol 1e-4; float16: 5e-3/5e-3; bfloat16: 1e-2/1e-2.
    `tie_tol` follows one rule for all dtypes: at a greedy split each side's gap is at most the sum of the two
    tokens' drifts, so a near tie is a gap within twice the atol/rtol band of a logprob near -5 (two candidates of
    a flat distribution), rounded to one significant figure: 2 * (atol + 5 * rtol) gives float32 1e-3, float16 0.06,
    bfloat16 0.1. Spellings such as "float32", "torch.float32", "fp32", "bf16", "half" are accepted.
    """
    if dtype is None:
        return FLOAT32
    key = str(dtype).strip().lower().removeprefix("torch.")
    if key == "":
        return FLOAT32
    try:
        return _DTYPE_ALIASES[key]
    except KeyError:
        known = "float32/fp32, float16/fp16/half, bfloat16/bf16, float64 (or None)"
        raise ValueError(
            f"tolerances_for: unknown dtype {dtype!r} (known: {known}); pass atol=, rtol=, tie_tol= explicitly"
        ) from None


def default_tolerances(expected: GenerationTrace, actual: GenerationTrace) -> Tolerances:
    """The loosest of the two traces' dtype defaults (symmetric); unknown dtypes fall back to bfloat16's."""
    found = []
    for dtype in (expected.dtype, actual.dtype):
        try:
            found.append(tolerances_for(dtype))
        except ValueError:
            found.append(BFLOAT16)
    return found[0].loosest(found[1])


def same(a: float, b: float) -> bool:
    """Bitwise-style equality of two floats as `==`, except that NaN equals NaN."""
    return a == b or (math.isnan(a) and math.isnan(b))


@dataclass(frozen=True)
class Overrides:
    """Tolerance fields a user set (ini options, a `genguard` marker, the CLI); None keeps the base's value."""

    atol: float | None = None
    rtol: float | None = None
    tie_tol: float | None = None

    @classmethod
    def of(cls, values: Mapping[str, object]) -> Overrides:
        """From a mapping such as ``{"atol": 1e-4}`` (other keys and None values are ignored)."""
        picked = {k: values.get(k) for k in ("atol", "rtol", "tie_tol")}
        return cls(
            **{k: float(v) for k, v in picked.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        )

    def on(self, base: Tolerances) -> Tolerances:
        """`base` with these fields in place of its own."""
        return base.replace(atol=self.atol, rtol=self.rtol, tie_tol=self.tie_tol)

    def over(self, other: Overrides) -> Overrides:
        """These overrides on top of `other` (a field set here wins)."""
        return Overrides(
            atol=other.atol if self.atol is None else self.atol,
            rtol=other.rtol if self.rtol is None else self.rtol,
            tie_tol=other.tie_tol if self.tie_tol is None else self.tie_tol,
        )

    def args(self) -> ToleranceArgs:
        """As `compare()` keywords."""
        return {"atol": self.atol, "rtol": self.rtol, "tie_tol": self.tie_tol}

    def as_dict(self) -> dict[str, float]:
        """The fields that are set (JSON-able)."""
        return {k: v for k, v in (("atol", self.atol), ("rtol", self.rtol), ("tie_tol", self.tie_tol)) if v is not None}

    def __bool__(self) -> bool:
        return bool(self.as_dict())


def resolve(default: Tolerances, args: ToleranceArgs) -> Tolerances:
    """The tolerances `compare()`/`verify()` keywords ask for: `tolerances` (else `default`) with the single fields
    on top."""
    base = args.get("tolerances") or default
    return base.replace(atol=args.get("atol"), rtol=args.get("rtol"), tie_tol=args.get("tie_tol"))
