"""The plugin's wiring: options in one group, header, markers, genguard_gpu skipping, quiet when unused."""

from __future__ import annotations

import pytest

XDIST = pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])


def test_options_are_grouped_under_genguard(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(["genguard: regression tests for model decoding:", "*--genguard-gpu*"])


@XDIST
def test_the_report_header_names_the_device_and_versions(pytester: pytest.Pytester, xdist: list[str]) -> None:
    pytester.makepyfile("def test_ok(): pass")
    result = pytester.runpytest("-p", "no:cacheprovider", *xdist)
    result.stdout.fnmatch_lines(["genguard: torch *, transformers *, syrupy *", "genguard: device cpu*"])
    result.assert_outcomes(passed=1)


@XDIST
def test_gpu_marked_tests_skip_with_a_reason_without_the_flag(pytester: pytest.Pytester, xdist: list[str]) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.genguard_gpu
        def test_needs_cuda():
            raise AssertionError("must not run without --genguard-gpu")
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "-rs", *xdist)
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*needs CUDA, run with --genguard-gpu*"])


@XDIST
def test_the_markers_are_registered_for_strict_markers(pytester: pytest.Pytester, xdist: list[str]) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.genguard(atol=1e-3)
        def test_marked():
            pass
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "--strict-markers", *xdist)
    result.assert_outcomes(passed=1)


@XDIST
def test_a_run_that_does_not_use_genguard_prints_no_genguard_summary(
    pytester: pytest.Pytester, xdist: list[str]
) -> None:
    pytester.makepyfile("def test_ok(): assert 1 + 1 == 2")
    result = pytester.runpytest("-p", "no:cacheprovider", *xdist)
    result.assert_outcomes(passed=1)
    assert "= genguard =" not in result.stdout.str()


@XDIST
def test_a_bad_tolerance_in_the_ini_file_is_a_usage_error(pytester: pytest.Pytester, xdist: list[str]) -> None:
    pytester.makeini("[pytest]\ngenguard_atol = tight\n")
    pytester.makepyfile("def test_ok(): pass")
    result = pytester.runpytest("-p", "no:cacheprovider", *xdist)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: ini option genguard_atol = 'tight' is not a number (in *tox.ini); *"])


def test_the_snapshot_fixture_without_syrupys_plugin_says_genguard_needs_it(pytester: pytest.Pytester) -> None:
    # Before: "fixture 'snapshot' not found" (issue 33). Tests that do not use the snapshot still run.
    pytester.makepyfile(
        """
        def test_snap(genguard_snapshot):
            raise AssertionError("must not run without syrupy's plugin")

        def test_plain():
            pass
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:syrupy")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*genguard_snapshot needs syrupy's pytest plugin (genguard stores snapshots through it), and this run "
            "disabled it (-p no:syrupy): drop -p no:syrupy from the command line, addopts or PYTEST_ADDOPTS*"
        ]
    )
    assert "fixture 'snapshot' not found" not in result.stdout.str()
