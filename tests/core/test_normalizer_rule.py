"""The comparison rule on logprobs normalized by a float32 sum (llama-server's: ``log(p)`` of float32 probabilities
over the vocabulary, `core.environments.NORMALIZER_FIELD`): the rounding of that sum moves every logprob of a step by
the same amount, up to N * 2^-23, so the chosen token's logprob may move that far while the top-k are judged as gaps
to it at float32 precision. Measured on SmolLM2-135M-Instruct's llama-server: 1e-4 shifts (N = 49,152: bound 5.9e-3),
gaps within float32's allowance."""

from __future__ import annotations

import dataclasses

import pytest
from trace_builder import step, trace

from pytest_genguard.core.compare import compare
from pytest_genguard.core.environments import NORMALIZER_FIELD, normalizer_bound
from pytest_genguard.core.verdict import Verdict

VOCAB = 49152
BOUND = VOCAB * 2.0**-23
TOP = [(5, -0.0197), (7, -4.681), (9, -6.651)]


def server(shift: float, gap_change: float = 0.0, *, declared: bool = True) -> object:
    """A server's trace of the reference's one step: every logprob moved by `shift`, the last gap by `gap_change`."""
    top = [(i, lp + shift) for i, lp in TOP]
    top[-1] = (top[-1][0], top[-1][1] + gap_change)
    environment = {"engine": "llama.cpp", "logprobs": "float32"} | ({NORMALIZER_FIELD: VOCAB} if declared else {})
    return trace([dataclasses.replace(step(top), lse=9.0)], environment=environment, model=None)


REFERENCE = trace([dataclasses.replace(step(TOP), lse=9.0)])


def test_the_bound_is_the_vocabulary_times_float32s_half_ulp_twice() -> None:
    assert normalizer_bound({NORMALIZER_FIELD: VOCAB}) == pytest.approx(5.86e-3, rel=1e-3)
    assert normalizer_bound({}) == 0.0 and normalizer_bound({NORMALIZER_FIELD: True}) == 0.0


def test_a_shared_shift_within_the_bound_holds() -> None:
    comparison = compare(REFERENCE, server(1e-4), check_fingerprints=False)
    assert comparison.ok, str(comparison)
    assert comparison.stats.max_share < 1.0


def test_the_same_shift_undeclared_is_a_regression() -> None:
    # Negative control: without the field, the float32 rule allows no 1e-4 on a logprob of -0.02.
    comparison = compare(REFERENCE, server(1e-4, declared=False), check_fingerprints=False)
    assert comparison.verdict is Verdict.REGRESSION


def test_a_shift_beyond_the_bound_is_a_regression() -> None:
    comparison = compare(REFERENCE, server(2 * BOUND), check_fingerprints=False)
    assert comparison.verdict is Verdict.REGRESSION
    assert "logprob" in str(comparison)


def test_a_moved_gap_is_a_regression_named_as_a_gap() -> None:
    comparison = compare(REFERENCE, server(1e-4, gap_change=1e-3), check_fingerprints=False)
    assert comparison.verdict is Verdict.REGRESSION
    assert "top_logprobs[2] - logprob (id 9)" in str(comparison)
