"""What a trace's environment fields say: its environment class (the key of per-environment baselines) and whether
two traces come from the same environment (where decoding is bitwise reproducible). Standard library only: the
fields themselves are collected by `pytest_genguard.hf.environment`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_genguard.core.jsontext import JSONScalar, changed_keys

__all__ = [
    "LIBRARY_FIELDS",
    "LOGPROBS_FIELD",
    "NORMALIZER_FIELD",
    "NOT_NUMERIC_FIELDS",
    "SCORES_FIELD",
    "EnvironmentDiff",
    "device_class",
    "environment_class",
    "environment_diff",
    "environment_differences",
    "logprobs_epsilon",
    "normalizer_bound",
    "numeric_diff",
    "same_environment",
    "scores_epsilon",
]

LOGPROBS_FIELD = "logprobs"
"""The environment field that says in which dtype genguard computed the logprobs: "float64" since pytest-genguard
0.2; absent in traces of 0.1, which computed them in float32."""


SCORES_FIELD = "scores"
"""The environment field that says in which dtype the processed scores (`Step.score`, `Step.best_score`) were
computed: "float32", whatever the logprobs were computed in. `generate()` casts each step's logits to float32 before
its processors run (beam search takes their log-softmax there, in float32), and teacher forcing and the engines
apply the processors to float32 logits too. Absent in traces written before the field: their scores were float32."""

NORMALIZER_FIELD = "logprobs_normalizer_terms"
"""The environment field of a trace whose logprobs were normalized by a float32 sum of this many probabilities (a
llama-server's: the vocabulary) rather than by a log-sum-exp of the logits: every logprob of a step then carries the
same error, the rounding of that sum (`normalizer_bound`). Absent: normalized as genguard does."""

_EPSILONS = {"float64": 2.0**-52, "float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}


def _epsilon(fields: Mapping[str, JSONScalar], field: str) -> float:
    """The machine epsilon of the dtype `fields[field]` names; float32's when the trace does not say (or names a
    dtype this version does not know)."""
    value = fields.get(field)
    return _EPSILONS.get(value, 2.0**-23) if isinstance(value, str) else 2.0**-23


def logprobs_epsilon(fields: Mapping[str, JSONScalar]) -> float:
    """The machine epsilon of the dtype the trace's logprobs (chosen and top-k) were computed in (float32's for a
    trace that does not say): the unit of their rounding, at the scale of each step's log-sum-exp."""
    return _epsilon(fields, LOGPROBS_FIELD)


def normalizer_bound(fields: Mapping[str, JSONScalar]) -> float:
    """How far a float32 sum of N probabilities can move a step's logprobs (0 without `NORMALIZER_FIELD`): each of
    its N terms is rounded once when computed (exp) and once when added to a sum of at least 1 (the largest term comes
    first), 2^-24 relative each: N * 2^-23, shared by every logprob of the step."""
    terms = fields.get(NORMALIZER_FIELD)
    if isinstance(terms, bool) or not isinstance(terms, int) or terms <= 0:
        return 0.0
    return terms * 2.0**-23


def scores_epsilon(fields: Mapping[str, JSONScalar]) -> float:
    """The machine epsilon of the dtype the trace's processed scores were computed in (`SCORES_FIELD`; float32's
    for a trace that does not say, as every version computed them)."""
    return _epsilon(fields, SCORES_FIELD)


def device_class(fields: Mapping[str, JSONScalar] | Any) -> str:
    """An environment class without its dtype: 'cpu'; on CUDA the toolkit torch was built for and the GPU capability,
    'cuda12.6-sm90' (cuBLAS's results are reproducible only for one toolkit on one GPU: a CUDA 13 build of torch does
    not give a CUDA 12.6 build's logits), 'cuda-sm90' where the trace does not say its toolkit."""
    if fields.get("device_type") == "cuda":
        cap = str(fields.get("gpu_capability") or "").replace(".", "")
        toolkit = fields.get("cuda")
        return f"cuda{toolkit if isinstance(toolkit, str) and toolkit[:1].isdigit() else ''}-sm{cap}"
    return str(fields.get("device_type") or "cpu")


def environment_class(fields: Mapping[str, JSONScalar] | Any) -> str:
    """A short key for environment-keyed baselines: 'cpu-float32', 'cuda12.6-sm90-bfloat16' (`device_class`, then
    the dtype; float32 when the dtype is unknown)."""
    return f"{device_class(fields)}-{fields.get('dtype') or 'float32'}"


# Fields that cannot change what a kernel computes: the interpreter, and which of several identical GPUs ran it
# (device_type and the GPU's name, capability and SM count are compared instead of "cuda:0" vs "cuda:1").
NOT_NUMERIC_FIELDS = frozenset({"python", "device"})


LIBRARY_FIELDS = ("trl", "peft")
"""Fields a recorder history's traces carry only where the library is installed (its release): TRL and PEFT train
the model as much as torch and transformers do. A field one side lacks is no difference: histories written before
these fields, or a run without the library, compare as before."""


EnvironmentDiff = tuple[tuple[str, JSONScalar, JSONScalar], ...]
"""``(field, expected value, actual value)`` per differing field, sorted by field; None for a field one side lacks."""


def environment_diff(expected: Mapping[str, JSONScalar], actual: Mapping[str, JSONScalar]) -> EnvironmentDiff:
    """Every environment field whose value differs (`jsontext.changed_keys`: a field set on one side only differs,
    values of another type differ, NaN equals NaN): the one rule, which `compare()` reports as
    `Comparison.environment_diff` and `numeric_diff` narrows to what can change a kernel's result. A
    `LIBRARY_FIELDS` field counts only when both sides have it."""
    return tuple(
        (k, expected.get(k), actual.get(k))
        for k in changed_keys(expected, actual)
        if k not in LIBRARY_FIELDS or (k in expected and k in actual)
    )


def numeric_diff(diff: EnvironmentDiff) -> EnvironmentDiff:
    """The rows of `diff` whose field can change what a kernel computes (all but `NOT_NUMERIC_FIELDS`)."""
    return tuple(row for row in diff if row[0] not in NOT_NUMERIC_FIELDS)


def environment_differences(expected: Mapping[str, JSONScalar], actual: Mapping[str, JSONScalar]) -> tuple[str, ...]:
    """The names of the numerically relevant fields whose values differ (`numeric_diff` of `environment_diff`)."""
    return tuple(k for k, _, _ in numeric_diff(environment_diff(expected, actual)))


def same_environment(expected: Mapping[str, JSONScalar], actual: Mapping[str, JSONScalar]) -> bool:
    """Whether two traces come from the same environment, where deterministic decoding is bitwise reproducible.

    Same environment = both environments recorded (non-empty), the same environment class, and every field except
    `python` and the device index equal: torch, transformers, platform, CPU capability, thread count, dtype,
    attention implementation, deterministic flags and, on CUDA, the CUDA/cuDNN versions, GPU name, capability, SM
    count, TF32 and cuBLAS workspace settings. Anything unknown counts as different, so the tolerant rule applies.
    """
    if not expected or not actual:
        return False
    if environment_class(expected) != environment_class(actual):
        return False
    return not environment_differences(expected, actual)
