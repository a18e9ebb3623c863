"""A snapshot recorded in one dtype never silently judges a run in another: the failure names the dtype switch
first, and only ``@pytest.mark.genguard(allow_dtype_change=True)`` lets the values decide."""

from __future__ import annotations

import pytest
from snapshot_support import run, set_variants, setup

TESTS = """
from conftest import make_trace


def test_path(genguard_snapshot):
    assert make_trace("test_path") == genguard_snapshot
"""

ALLOWED = """
import pytest
from conftest import make_trace


@pytest.mark.genguard(allow_dtype_change=True)
def test_path(genguard_snapshot):
    assert make_trace("test_path") == genguard_snapshot
"""


@pytest.fixture
def recorded(pytester: pytest.Pytester) -> pytest.Pytester:
    setup(pytester, TESTS)
    run(pytester, "--snapshot-update").assert_outcomes(passed=1)
    return pytester


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_float32_snapshot_fails_a_run_in_another_dtype_naming_it_first(recorded: pytest.Pytester, dtype: str) -> None:
    set_variants(recorded, test_path={"dtype": dtype})  # the same values: they hold under any dtype's tolerance
    result = run(recorded)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            f"E  *  regression: dtype changed float32 -> {dtype}, judged under the looser dtype's tolerances (atol *); "
            "the values hold (identical *) but the test does not allow a dtype switch; if the switch is intended, "
            "mark the test @pytest.mark.genguard(allow_dtype_change=True), or keep a baseline per dtype: *"
        ]
    )


def test_the_marker_lets_the_values_decide_and_still_names_the_switch(recorded: pytest.Pytester) -> None:
    (recorded.path / "test_gen.py").write_text(ALLOWED)
    set_variants(recorded, test_path={"dtype": "float16", "drift": 2e-3})  # within float16's, beyond float32's
    run(recorded).assert_outcomes(passed=1)
    set_variants(recorded, test_path={"dtype": "float16", "flip": "genuine"})  # a real change still fails
    result = run(recorded)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["E  *  regression: dtype changed float32 -> float16, * allowed by the test; regression: prompt 0 * step 2*"]
    )


def test_the_same_dtype_is_unaffected(recorded: pytest.Pytester) -> None:
    set_variants(recorded, test_path={"drift": 2e-3})  # the control: beyond float32's tolerance, no dtype switch
    result = run(recorded)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["E  *  regression: prompt 0 'hello' drifts at step 0 *"])
