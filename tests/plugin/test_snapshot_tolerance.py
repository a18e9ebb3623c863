"""The tolerant rule through genguard_snapshot: drift within tolerance passes without touching the file, drift beyond
it and genuine divergences fail as regressions, a near-tie divergence is tolerated."""

from __future__ import annotations

import pytest
from snapshot_support import ONE_TEST, age, file_state, run, set_variants, setup, snapshot_path


@pytest.fixture
def recorded(pytester: pytest.Pytester) -> pytest.Pytester:
    setup(pytester, ONE_TEST)
    run(pytester, "--snapshot-update").assert_outcomes(passed=1)
    age(snapshot_path(pytester, "test_greedy"))
    return pytester


@pytest.mark.parametrize("update", [[], ["--snapshot-update"]], ids=["check", "snapshot-update"])
def test_snapshot_is_not_rewritten_when_drift_is_below_tolerance(recorded: pytest.Pytester, update: list[str]) -> None:
    path = snapshot_path(recorded, "test_greedy")
    before = file_state(path)
    set_variants(recorded, test_greedy={"drift": 2e-5})  # fp32: allowed 1e-6 + 1e-4 * 0.5 = 5.1e-5
    result = run(recorded, *update)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["snapshots: 1 matched, 0 tolerated divergences, 0 stale, 0 regressed"])
    assert "updated" not in result.stdout.str()
    assert file_state(path) == before


def test_drift_beyond_tolerance_fails_as_a_regression_with_the_step_and_the_fix(recorded: pytest.Pytester) -> None:
    path = snapshot_path(recorded, "test_greedy")
    before = file_state(path)
    set_variants(recorded, test_greedy={"drift": 1e-3})
    result = run(recorded)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "E   * assert GenerationTrace == genguard_snapshot 'test_greedy' "
            "(__snapshots__/test_gen/test_greedy.genguard)",
            "E  *  regression: prompt 0 'hello' drifts at step 0 (token ' the', id 10): logprob -0.5 vs -0.499 "
            "(|diff| 0.001 > tol 5.1e-05)",
            "snapshots: 0 matched, 0 tolerated divergences, 0 stale, 1 regressed",
        ]
    )
    assert file_state(path) == before


def test_the_failure_shows_the_window_statistics_and_the_fix_command_with_vv(recorded: pytest.Pytester) -> None:
    set_variants(recorded, test_greedy={"flip": "genuine"})
    result = run(recorded, "-vv")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "E  *  regression: prompt 0 'hello' diverges at step 2: expected ' sat' (id 30, logprob -0.2) but got "
            "' ran' (id 32, logprob -0.3); not a near tie (gap 4.8 > tie_tol 0.001); margin was 2.8",
            "E  *  prompt 0 'hello', steps around the divergence:",
            "E  *  >>     2  expected  ' sat' *",
            "E  *  >>        actual    ' ran' *",
            "E  *  statistics (steps up to each prompt's first divergence):",
            "E  *  fix: if the new behaviour is intended: pytest --snapshot-update test_gen.py::test_greedy",
            "E  *  JSON diff (- snapshot, + received):",
        ]
    )


def test_a_near_tie_divergence_is_tolerated(recorded: pytest.Pytester) -> None:
    path = snapshot_path(recorded, "test_greedy")
    before = file_state(path)
    set_variants(recorded, test_greedy={"flip": "tie"})
    result = run(recorded, "--snapshot-update")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["snapshots: 0 matched, 1 tolerated divergence, 0 stale, 0 regressed"])
    assert file_state(path) == before


def test_a_near_tie_fails_when_the_marker_sets_tie_tol_to_zero(recorded: pytest.Pytester) -> None:
    recorded.makepyfile(
        test_gen="""
        import pytest
        from conftest import make_trace

        @pytest.mark.genguard(tie_tol=0)
        def test_greedy(genguard_snapshot):
            assert make_trace("test_greedy") == genguard_snapshot
        """
    )
    set_variants(recorded, test_greedy={"flip": "tie"})
    result = run(recorded)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["E  *  regression: prompt 0 'hello' diverges at step 1: *tie_tol 0: no divergence tolerated*"]
    )


def test_snapshot_update_rewrites_a_regressed_snapshot_and_reports_it_updated(recorded: pytest.Pytester) -> None:
    path = snapshot_path(recorded, "test_greedy")
    before = file_state(path)
    set_variants(recorded, test_greedy={"flip": "genuine"})
    result = run(recorded, "--snapshot-update")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["snapshots: 0 matched, *1 updated", "*1 snapshot updated*"])
    assert file_state(path) != before
    assert '"id": 32, "token": " ran"' in path.read_text(encoding="utf-8")
    run(recorded).assert_outcomes(passed=1)
