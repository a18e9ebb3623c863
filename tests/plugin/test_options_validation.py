"""Every genguard option and ini value is checked before any test runs: a bad one is a usage error (exit code 4)
naming the option, the value and what is accepted. It used to reach compare() as a raw ValueError in every test, and
with --snapshot-update syrupy then deleted every snapshot as unused."""

from __future__ import annotations

import pytest
from snapshot_support import ONE_TEST, XDIST, file_state, run, setup, snapshot_path

FIX = "a tolerance is a finite number >= 0: write e.g. {key} = {example}, or remove it to use the dtype default"
EXAMPLES = {"genguard_atol": "1e-6", "genguard_rtol": "1e-4", "genguard_tie_tol": "1e-3"}


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        ("genguard_rtol", "-1", "is negative"),
        ("genguard_tie_tol", "nan", "is not a number (NaN)"),
        ("genguard_atol", "inf", "is infinite: it would accept any drift"),
        ("genguard_atol", "-inf", "is infinite: it would accept any drift"),
        ("genguard_rtol", "1e-4x", "is not a number"),
    ],
    ids=["negative", "nan", "inf", "minus-inf", "typo"],
)
@XDIST
def test_a_bad_tolerance_is_a_usage_error_and_no_snapshot_is_touched(
    pytester: pytest.Pytester, key: str, value: str, problem: str, xdist: list[str]
) -> None:
    setup(pytester, ONE_TEST)
    run(pytester, "--snapshot-update").assert_outcomes(passed=1)
    path = snapshot_path(pytester, "test_greedy")
    before = file_state(path)
    pytester.makeini(f"[pytest]\n{key} = {value}\n")
    result = run(pytester, "--snapshot-update", *xdist)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    fix = FIX.format(key=key, example=EXAMPLES[key])
    assert result.stderr.lines[0] == (
        f"ERROR: ini option {key} = {value!r} {problem} (in {pytester.path / 'tox.ini'}); {fix}"
    )
    assert file_state(path) == before
    assert "passed" not in result.stdout.str() and "deleted" not in result.stdout.str()


def test_a_value_given_with_o_says_so(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_never():\n    raise AssertionError('must not run')\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "-o", "genguard_tie_tol=-0.5")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: ini option genguard_tie_tol = '-0.5' is negative (set with -o); *"])


def test_zero_tolerances_are_valid(pytester: pytest.Pytester) -> None:
    setup(pytester, ONE_TEST)
    pytester.makeini("[pytest]\ngenguard_atol = 0\ngenguard_rtol = 0.0\ngenguard_tie_tol = 0\n")
    run(pytester, "--snapshot-update").assert_outcomes(passed=1)
    run(pytester).assert_outcomes(passed=1)  # bitwise equal: passes under zero tolerances


@pytest.mark.parametrize("where", ["file", "under-a-file"])
def test_a_cache_dir_that_cannot_be_a_folder_is_a_usage_error(pytester: pytest.Pytester, where: str) -> None:
    pytester.makepyfile("def test_never():\n    raise AssertionError('must not run')\n")
    (pytester.path / "cache.txt").write_text("a file")
    value = "cache.txt" if where == "file" else "cache.txt/models"
    pytester.makeini(f"[pytest]\ngenguard_cache_dir = {value}\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    path = pytester.path / value
    reason = (
        f"{path} is a file, not a folder"
        if where == "file"
        else f"{path} cannot be created because {pytester.path / 'cache.txt'} is a file"
    )
    assert result.stderr.lines[0] == (
        f"ERROR: ini option genguard_cache_dir = {value!r} (in {pytester.path / 'tox.ini'}): {reason}; name a folder "
        "genguard may create and write (ini option genguard_cache_dir, or the environment variable GENGUARD_CACHE_DIR "
        "when pytest's cache is disabled)"
    )


def test_the_cache_env_var_is_checked_when_it_is_the_cache(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile("def test_ok():\n    pass\n")
    (pytester.path / "cache.txt").write_text("a file")
    monkeypatch.setenv("GENGUARD_CACHE_DIR", str(pytester.path / "cache.txt"))
    used = pytester.runpytest("-p", "no:cacheprovider")  # no pytest cache: the env var is the cache folder
    assert used.ret == pytest.ExitCode.USAGE_ERROR
    used.stderr.fnmatch_lines([f"ERROR: environment variable GENGUARD_CACHE_DIR='{pytester.path}/cache.txt': *"])
    pytester.runpytest().assert_outcomes(passed=1)  # pytest's cache is used instead: the variable plays no part


def test_a_record_reference_folder_under_a_file_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_never():\n    raise AssertionError('must not run')\n")
    (pytester.path / "refs.txt").write_text("a file")
    result = pytester.runpytest("-p", "no:cacheprovider", "--genguard-record-reference", "refs.txt/gpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: --genguard-record-reference refs.txt/gpu: refs.txt/gpu cannot be created because refs.txt is a file*"]
    )
