"""Tolerances: how far two traces may drift and still be the same behaviour, the defaults per dtype, the training
tolerance, and the per-test overrides (ini options, the `genguard` marker, `--atol` of the CLI). Standard library only.
"""

from __future__ import annotations

import contextvars
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
    "LSE_ULPS",
    "TIE_ULPS",
    "TOLERANCE_FIELDS",
    "TRAINING",
    "TRAINING_LOSS",
    "Overrides",
    "ToleranceArgs",
    "Tolerances",
    "begin_in_force",
    "canonical_dtype",
    "default_tolerances",
    "dtype_change",
    "dtype_default",
    "end_in_force",
    "resolve",
    "rounding_epsilon",
    "same",
    "tolerances_for",
    "tolerances_in_force",
]


TOLERANCE_FIELDS = ("atol", "rtol", "tie_tol", "lse_ulps")
"""The fields of `Tolerances` a user may set (ini options ``genguard_<field>``, the `genguard` marker); `genguard diff`
sets `atol`, `rtol` and `tie_tol` only (no ``--lse-ulps``)."""


class ToleranceArgs(TypedDict, total=False):
    """The tolerance keywords of `compare()` and `verify()`: `tolerances` replaces the dtype default as the base,
    `atol`/`rtol`/`tie_tol`/`lse_ulps` override single fields of it; `allow_dtype_change` lets traces of two dtypes
    pass (they fail otherwise, whatever their values)."""

    atol: float | None
    rtol: float | None
    tie_tol: float | None
    lse_ulps: float | None
    tolerances: Tolerances | None
    allow_dtype_change: bool | None


@dataclass(frozen=True)
class Tolerances:
    """How far two traces may drift and still count as the same behaviour.

    Each logprob/score pair of a step may differ by ``atol + rtol * max(|a|, |b|) + lse_ulps * eps * |lse|``: `eps`
    is the machine epsilon of the dtype the value was computed in, as the trace says (the coarser side's): logprobs in
    float32 in traces of pytest-genguard 0.1, float64 since; processed scores in float32 always (beam search's are
    float32 log-softmaxes), `core.environments`. `lse` is the step's log-sum-exp (`Step.lse`, the larger side's; 0 where
    neither side has it, which is the rule of 0.1). Symmetric, unlike numpy's ``rtol * |b|``, so that
    ``compare(a, b)`` and ``compare(b, a)`` agree. `atol`/`rtol` follow the drift the network propagates into the
    logits (it grows with the logprob); the last term the rounding of ``logprob = logit - lse``, which happens at
    the scale of the logits however confident the token (see docs/rule.md). `tie_tol` bounds the
    logprob gap between the two tokens at a split for it to count as a near tie (`near_tie`); ``tie_tol=0``
    tolerates no split at all.
    """

    atol: float
    rtol: float
    tie_tol: float
    lse_ulps: float = 0.0

    def __post_init__(self) -> None:
        for name in TOLERANCE_FIELDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise ValueError(f"Tolerances: {name} must be a number >= 0, got {value!r}")

    def replace(
        self,
        *,
        atol: float | None = None,
        rtol: float | None = None,
        tie_tol: float | None = None,
        lse_ulps: float | None = None,
    ) -> Tolerances:
        """A copy with the given fields overridden (None keeps the current value)."""
        return Tolerances(
            atol=self.atol if atol is None else atol,
            rtol=self.rtol if rtol is None else rtol,
            tie_tol=self.tie_tol if tie_tol is None else tie_tol,
            lse_ulps=self.lse_ulps if lse_ulps is None else lse_ulps,
        )

    def loosest(self, other: Tolerances) -> Tolerances:
        """Field-wise maximum: the tolerance for comparing traces recorded in two different dtypes."""
        return Tolerances(
            max(self.atol, other.atol),
            max(self.rtol, other.rtol),
            max(self.tie_tol, other.tie_tol),
            max(self.lse_ulps, other.lse_ulps),
        )

    def allowed(self, a: float, b: float, rounding: float = 0.0) -> float:
        """The largest |a - b| accepted for this pair of finite values; `rounding` is one epsilon of the dtype the
        logprobs were computed in times the step's |log-sum-exp| (0: the rule of pytest-genguard 0.1)."""
        return self.atol + self.rtol * max(abs(a), abs(b)) + self.lse_ulps * rounding

    def close(self, a: float, b: float, rounding: float = 0.0) -> bool:
        """Whether two values agree: equal (NaN equals NaN, inf equals inf), or finite and within tolerance."""
        if same(a, b):
            return True
        if not (math.isfinite(a) and math.isfinite(b)):
            return False
        return abs(a - b) <= self.allowed(a, b, rounding)

    def near_tie(self, gap: float, rounding: float = 0.0) -> bool:
        """Whether two tokens `gap` apart in logprob are a near tie: the one rule for a tolerated split, a fragile
        step (`record()`'s summary, `genguard show`, the HTML report) and the failure text. NaN is never one.
        `rounding` is the step's rounding unit in a reduced-precision trace (`rounding_epsilon` times the step's
        |log-sum-exp|: one ulp of its logits); the gap may be `TIE_ULPS` of them larger."""
        return self.tie_tol > 0 and gap <= self.tie_limit(rounding)

    def tie_limit(self, rounding: float = 0.0) -> float:
        """The largest gap `near_tie` accepts at a step whose rounding unit is `rounding`."""
        return self.tie_tol + TIE_ULPS * rounding

    def __str__(self) -> str:
        text = f"atol {self.atol:g}, rtol {self.rtol:g}, tie_tol {self.tie_tol:g}"
        return text + (f", lse_ulps {self.lse_ulps:g}" if self.lse_ulps else "")


EXACT = Tolerances(0.0, 0.0, 0.0)
"""Bitwise comparison, for reruns within one environment (deterministic settings on one machine)."""

LSE_ULPS = 8.0
"""The rounding allowance of a logprob, in machine epsilons of the dtype it was computed in, times the step's
|log-sum-exp|. The rounding of ``logprob = logit - lse`` does not shrink with the logprob: in float32 (how
pytest-genguard 0.1 computed logprobs) the sum of exps over the vocabulary loses up to half an ulp per term, which
the kernel set's vector width decides, and one ulp of an lse near 13 is already 1e-6, a confident token's whole
allowance. Since 0.2 genguard computes logprobs in float64 (environment field ``logprobs``), where the term is
~1e-14: it matters only where a trace with float32-computed logprobs takes part. Measured on the data of
`fixtures/cross_kernel` (docs/rule.md): float32-computed logprobs were up to 4.5 epsilons of |lse|
off the float64 value (AVX2) and 2.5 apart from each other (AVX2 vs AVX-512); eight keep that noise at 30% of the
allowance."""

TIE_ULPS = 2.0
"""How many rounding units (`rounding_epsilon` times the step's |log-sum-exp|) a near tie's gap may exceed
`tie_tol` by, in a bfloat16 or float16 trace. A gap is a difference of two logits: the log-sum-exp's own rounding
cancels in it, which is why it needs fewer units than a value (`LSE_ULPS`). Measured on SmolLM2-135M-Instruct in
bfloat16 (`fixtures/real_model`, benchmarks/real_model.py): every split between the AVX-512, AVX2 and scalar kernel
sets had a gap of at most 1.11 units; a rope-base bug (1e5 -> 1e4) split at 3.9, 8.6 and 12.6 units."""

_REDUCED_EPSILONS = {"bfloat16": 2.0**-7, "float16": 2.0**-10}


def rounding_epsilon(dtype: str | None) -> float:
    """The machine epsilon the logits of a model run in `dtype` are rounded with, where it decides the comparison:
    bfloat16 (2^-7) and float16 (2^-10). Their last layer writes its logits in that dtype, so each logit, and so each
    logprob, carries an ulp at the scale of the logits (0.125 for a logit of 16-32 in bfloat16) however confident
    the token; no atol/rtol band follows that. 0 for float32 and unknown dtypes: there the network's rounding is what
    atol/rtol were measured on (docs/rule.md)."""
    return _REDUCED_EPSILONS.get(canonical_dtype(dtype) or "", 0.0)


FLOAT32 = Tolerances(atol=1e-6, rtol=1e-4, tie_tol=1e-3, lse_ulps=LSE_ULPS)
FLOAT16 = Tolerances(atol=5e-3, rtol=5e-3, tie_tol=0.06, lse_ulps=LSE_ULPS)
BFLOAT16 = Tolerances(atol=1e-2, rtol=1e-2, tie_tol=0.1, lse_ulps=LSE_ULPS)

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


_CANONICAL = {FLOAT32: "float32", FLOAT16: "float16", BFLOAT16: "bfloat16"}


def canonical_dtype(dtype: str | None) -> str | None:
    """One spelling per dtype ("fp16", "torch.float16" -> "float16"; float64 counts as float32, whose rule it
    meets); an unknown dtype as written, None as None."""
    if dtype is None:
        return None
    try:
        return _CANONICAL[tolerances_for(dtype)]
    except ValueError:
        return str(dtype)


def dtype_change(expected: GenerationTrace, actual: GenerationTrace) -> tuple[str, str] | None:
    """(recorded, new) dtype when the two traces were recorded in different dtypes; None when they agree or one side
    does not say. A dtype switch is never silent: `compare()` fails it unless the caller allows it."""
    e, a = canonical_dtype(expected.dtype), canonical_dtype(actual.dtype)
    if e is None or a is None or e == a:
        return None
    return e, a


def dtype_default(dtype: str | None) -> Tolerances:
    """`tolerances_for(dtype)`, with bfloat16's (the loosest) for a dtype it does not know: for reading a trace
    rather than for a caller's argument."""
    try:
        return tolerances_for(dtype)
    except ValueError:
        return BFLOAT16


def default_tolerances(expected: GenerationTrace, actual: GenerationTrace) -> Tolerances:
    """The loosest of the two traces' dtype defaults (symmetric); unknown dtypes fall back to bfloat16's."""
    return dtype_default(expected.dtype).loosest(dtype_default(actual.dtype))


def same(a: float, b: float) -> bool:
    """Bitwise-style equality of two floats as `==`, except that NaN equals NaN."""
    return a == b or (math.isnan(a) and math.isnan(b))


@dataclass(frozen=True)
class Overrides:
    """Tolerance fields a user set (ini options, a `genguard` marker, the CLI); None keeps the base's value.
    `allow_dtype_change` (a marker's opt-in) travels with them to `compare()`."""

    atol: float | None = None
    rtol: float | None = None
    tie_tol: float | None = None
    lse_ulps: float | None = None
    allow_dtype_change: bool | None = None

    @classmethod
    def of(cls, values: Mapping[str, object]) -> Overrides:
        """From a mapping such as ``{"atol": 1e-4}`` (other keys and None values are ignored)."""
        picked = {k: values.get(k) for k in TOLERANCE_FIELDS}
        allow = values.get("allow_dtype_change")
        return cls(
            **{k: float(v) for k, v in picked.items() if isinstance(v, (int, float)) and not isinstance(v, bool)},
            allow_dtype_change=allow if isinstance(allow, bool) else None,
        )

    def on(self, base: Tolerances) -> Tolerances:
        """`base` with these fields in place of its own."""
        return base.replace(atol=self.atol, rtol=self.rtol, tie_tol=self.tie_tol, lse_ulps=self.lse_ulps)

    def over(self, other: Overrides) -> Overrides:
        """These overrides on top of `other` (a field set here wins)."""
        return Overrides(
            atol=other.atol if self.atol is None else self.atol,
            rtol=other.rtol if self.rtol is None else self.rtol,
            tie_tol=other.tie_tol if self.tie_tol is None else self.tie_tol,
            lse_ulps=other.lse_ulps if self.lse_ulps is None else self.lse_ulps,
            allow_dtype_change=other.allow_dtype_change if self.allow_dtype_change is None else self.allow_dtype_change,
        )

    def args(self) -> ToleranceArgs:
        """As `compare()` keywords."""
        return {
            "atol": self.atol,
            "rtol": self.rtol,
            "tie_tol": self.tie_tol,
            "lse_ulps": self.lse_ulps,
            "allow_dtype_change": self.allow_dtype_change,
        }

    def as_dict(self) -> dict[str, float | bool]:
        """The fields that are set (JSON-able)."""
        return {k: v for k in (*TOLERANCE_FIELDS, "allow_dtype_change") if (v := getattr(self, k)) is not None}

    def __bool__(self) -> bool:
        return bool(self.as_dict())


def resolve(default: Tolerances, args: ToleranceArgs) -> Tolerances:
    """The tolerances `compare()`/`verify()` keywords ask for: `tolerances` (else `default`) with the single fields
    on top."""
    base = args.get("tolerances") or default
    return base.replace(
        atol=args.get("atol"), rtol=args.get("rtol"), tie_tol=args.get("tie_tol"), lse_ulps=args.get("lse_ulps")
    )


_IN_FORCE: contextvars.ContextVar[Overrides] = contextvars.ContextVar("genguard_tolerances", default=Overrides())


def begin_in_force(overrides: Overrides) -> contextvars.Token[Overrides]:
    """Make `overrides` (the running test's ini options and marker) the tolerances in force (the plugin does)."""
    return _IN_FORCE.set(overrides)


def end_in_force(token: contextvars.Token[Overrides]) -> None:
    _IN_FORCE.reset(token)


def tolerances_in_force(dtype: str | None) -> Tolerances:
    """The tolerances a trace of `dtype` is read with where no comparison names them: its dtype default with the
    running test's overrides on top. What `record()` calls a fragile step (`Tolerances.near_tie` of its margin) is
    what the test's own comparison would call a near tie."""
    return _IN_FORCE.get().on(dtype_default(dtype))
