"""Tolerances: dtype defaults, overridden by the ini options genguard_atol/rtol/tie_tol, overridden per test by
@pytest.mark.genguard(...) (the marker wins); bad marker arguments are errors that name the marker."""

from __future__ import annotations

import pytest
from snapshot_support import ONE_TEST, run, set_variants, setup

MARKED = """
import pytest
from conftest import make_trace

@pytest.mark.genguard({args})
def test_greedy(genguard_snapshot):
    assert make_trace("test_greedy") == genguard_snapshot
"""


@pytest.fixture
def recorded(pytester: pytest.Pytester) -> pytest.Pytester:
    setup(pytester, ONE_TEST)
    run(pytester, "--snapshot-update").assert_outcomes(passed=1)
    set_variants(pytester, test_greedy={"drift": 1e-3})  # beyond the float32 default (5.1e-5 here)
    return pytester


def test_the_ini_atol_loosens_the_dtype_default(recorded: pytest.Pytester) -> None:
    run(recorded).assert_outcomes(failed=1)
    recorded.makeini("[pytest]\ngenguard_atol = 2e-3\n")
    result = run(recorded)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["snapshots: 1 matched, *"])


def test_the_marker_wins_over_the_ini(recorded: pytest.Pytester) -> None:
    recorded.makeini("[pytest]\ngenguard_atol = 2e-3\n")
    recorded.makepyfile(test_gen=MARKED.format(args="atol=1e-6, rtol=0"))
    result = run(recorded)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["E  *  regression: *(|diff| 0.001 > tol 1e-06)*"])


def test_a_marker_loosens_one_test(recorded: pytest.Pytester) -> None:
    recorded.makepyfile(test_gen=MARKED.format(args="rtol=0.01"))
    run(recorded).assert_outcomes(passed=1)


def test_a_class_marker_applies_and_the_method_marker_wins_per_key(recorded: pytest.Pytester) -> None:
    recorded.makepyfile(
        test_gen="""
        import pytest
        from conftest import make_trace

        @pytest.mark.genguard(atol=1.0, tie_tol=0)
        class TestGreedy:
            def test_loose(self, genguard_snapshot):
                assert make_trace("test_greedy") == genguard_snapshot
                assert genguard_snapshot.overrides.as_dict() == {"atol": 1.0, "tie_tol": 0.0}

            @pytest.mark.genguard(atol=1e-6)
            def test_tight(self, genguard_snapshot):
                assert genguard_snapshot.overrides.as_dict() == {"atol": 1e-6, "tie_tol": 0.0}
        """
    )
    run(recorded, "--snapshot-update").assert_outcomes(passed=2)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            "atoll=1e-3",
            "unknown argument 'atoll'; accepted: atol, rtol, tie_tol, lse_ulps, allow_nonfinite, allow_dtype_change, "
            "fidelity",
        ),
        ("atol='tight'", "atol='tight' is not a number >= 0 (write e.g. atol=1e-4)"),
        ("rtol=-1.0", "rtol=-1.0 is not a number >= 0*"),
        ("tie_tol=True", "tie_tol=True is not a number >= 0*"),
        ("atol=float('inf')", "atol=inf is infinite: it would accept any drift (write e.g. atol=1e-4)"),
        ("allow_nonfinite='yes'", "allow_nonfinite='yes' is not True or False"),
        (
            "1e-3",
            "takes keyword arguments only (atol=, rtol=, tie_tol=, lse_ulps=, allow_nonfinite=, "
            "allow_dtype_change=, fidelity=); got (0.001,)",
        ),
    ],
    ids=["unknown-key", "string", "negative", "bool", "infinite", "allow-nonfinite-not-bool", "positional"],
)
def test_bad_marker_arguments_are_an_error_of_that_test_naming_the_marker(
    recorded: pytest.Pytester, args: str, message: str
) -> None:
    recorded.makepyfile(test_gen=MARKED.format(args=args) + "\ndef test_unmarked():\n    pass\n")
    result = run(recorded)
    result.assert_outcomes(errors=1, passed=1)
    assert "INTERNALERROR" not in result.stdout.str()
    result.stdout.fnmatch_lines([f"*@pytest.mark.genguard on test_gen.py::test_greedy: {message}*"])


def test_a_bad_ini_tolerance_is_a_usage_error(pytester: pytest.Pytester) -> None:
    setup(pytester, ONE_TEST)
    pytester.makeini("[pytest]\ngenguard_rtol = tight\n")
    result = run(pytester)
    result.stderr.fnmatch_lines(
        [
            "*genguard_rtol = 'tight' is not a number (in *tox.ini); a tolerance is a finite number >= 0: write "
            "e.g. genguard_rtol = 1e-4, or remove it to use the dtype default"
        ]
    )
