"""The snapshot rule on a real chat model's traces (fixtures/real_model: SmolLM2-135M-Instruct, recorded under the
AVX-512, AVX2 and scalar kernel sets). float32 holds across kernel sets, threads and beam search; a bfloat16 snapshot
recorded under one kernel set is not a regression under another (its greedy paths part at near ties the logits' own
bf16 rounding decides), while a clear bf16 bug (rope base 1e5 -> 1e4) still is. Torch-free: the traces are data."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from pytest_genguard.core.compare import compare
from pytest_genguard.core.tolerances import TIE_ULPS, rounding_epsilon
from pytest_genguard.core.trace import GenerationTrace
from pytest_genguard.core.verdict import Verdict

DATA = Path(__file__).resolve().parents[2] / "fixtures" / "real_model"


def load(name: str) -> GenerationTrace:
    path = DATA / f"{name}.json"
    return GenerationTrace.from_json(path.read_text(encoding="utf-8"), source=str(path))


@pytest.mark.parametrize(
    ("recorded", "other"),
    [
        ("greedy_avx512", "greedy_avx2"),
        ("greedy_avx512", "greedy_default"),
        ("greedy_avx512", "greedy_t2"),
        ("beam_avx512", "beam_avx2"),
    ],
)
def test_float32_holds_across_kernel_sets_and_threads(recorded: str, other: str) -> None:
    result = compare(load(recorded), load(other))
    assert result.ok, result.render()
    assert result.verdict is Verdict.WITHIN_TOLERANCE  # not identical: the kernels did differ


@pytest.mark.parametrize(
    ("recorded", "other"),
    [("bf16_avx512", "bf16_avx2"), ("bf16_avx512", "bf16_default"), ("bf16_avx2", "bf16_default")],
)
def test_a_bf16_snapshot_is_no_regression_on_another_kernel_set(recorded: str, other: str) -> None:
    expected, actual = load(recorded), load(other)
    for a, b in ((expected, actual), (actual, expected)):  # symmetric
        result = compare(a, b)
        assert result.ok, result.render()
    divergences = compare(expected, actual).divergences
    assert divergences and all(d.tolerated for d in divergences)  # the paths do part: at near ties
    assert any("tie limit" in d.detail for d in divergences)


def test_the_bf16_noise_is_beyond_the_float_rule_alone() -> None:
    """Why the bf16 rule allows the logits' rounding: without it (values and ties judged as in float32, scaled by
    the bf16 atol/rtol only) the same weights on another CPU read as a regression."""
    expected, actual = (
        dataclasses.replace(load(n), model=None, environment={}) for n in ("bf16_avx512", "bf16_default")
    )
    float_rule = compare(expected, actual, check_fingerprints=False, atol=1e-2, rtol=1e-2, tie_tol=0.1)
    assert float_rule.verdict is Verdict.REGRESSION


def test_a_rope_base_bug_in_bf16_is_a_regression() -> None:
    """Negative control: rope base 1e5 -> 1e4 (a conversion that read the wrong rope parameter); its greedy paths
    part at gaps of 3.9 to 12.6 rounding units, where the kernel sets parted at 1.11 at most."""
    result = compare(load("bf16_avx512"), load("bf16_avx512_rope_bug"), check_fingerprints=False)
    assert result.verdict is Verdict.REGRESSION, result.render()
    assert any(not d.tolerated for d in result.divergences)


def test_a_mild_norm_bug_in_bf16_lies_below_the_snapshot_rule() -> None:
    """What the free-running bf16 rule cannot see (docs/rule.md): one norm weight off by 5% moves the logits less
    than another CPU's bf16 rounding; the fidelity budget against the float32 model sees it (tests/hf)."""
    result = compare(load("bf16_avx512"), load("bf16_avx512_norm_bug"), check_fingerprints=False)
    assert result.ok


def test_the_rounding_unit_is_the_bf16_ulp_of_the_logits() -> None:
    step = load("bf16_avx512").prompts[0].steps[0]
    assert step.lse is not None and 16 <= abs(step.lse) < 32
    unit = rounding_epsilon("bfloat16") * abs(step.lse)
    assert 0.125 <= unit < 0.25  # one ulp of a bf16 logit of 16-32 is 0.125
    assert rounding_epsilon("float32") == 0.0 and rounding_epsilon("float16") == 2.0**-10
    assert TIE_ULPS == 2.0
