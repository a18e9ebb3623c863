"""genguard_snapshot records with --snapshot-update, fails on a missing snapshot, and matches what it recorded."""

from __future__ import annotations

import pytest
from snapshot_support import N2, ONE_TEST, file_state, run, setup, snapshot_path


def test_a_missing_snapshot_fails_naming_the_file_and_the_command_that_records_it(pytester: pytest.Pytester) -> None:
    setup(pytester, ONE_TEST)
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*genguard snapshot 'test_greedy' does not exist (__snapshots__/test_gen/test_greedy.genguard);"
            " record it with: pytest --snapshot-update test_gen.py::test_greedy",
            "*1 snapshot failed*",
        ]
    )
    assert not snapshot_path(pytester, "test_greedy").exists()


def test_snapshot_update_creates_the_trace_json_and_the_next_run_matches_it(pytester: pytest.Pytester) -> None:
    setup(pytester, ONE_TEST)
    created = run(pytester, "--snapshot-update", *N2)  # written by an xdist worker
    created.assert_outcomes(passed=1)
    created.stdout.fnmatch_lines(["snapshots: 0 matched, *1 created", "*1 snapshot generated*"])
    path = snapshot_path(pytester, "test_greedy")
    text = path.read_text(encoding="utf-8")
    from pytest_genguard.core.trace import GenerationTrace

    trace = GenerationTrace.from_json(text)  # the trace's own JSON format, metadata first, one step per line
    assert trace.prompts[0].token_ids == (10, 20, 30)
    assert text.startswith('{\n  "schema": 1,\n  "settings": {')
    assert [line.strip()[:28] for line in text.splitlines() if '"id": ' in line] == [
        '{"id": 10, "token": " the", ',
        '{"id": 20, "token": " cat", ',
        '{"id": 30, "token": " sat", ',
    ]

    matched = run(pytester)
    matched.assert_outcomes(passed=1)
    matched.stdout.fnmatch_lines(
        ["snapshots: 1 matched, 0 tolerated divergences, 0 stale, 0 regressed", "*1 snapshot passed*"]
    )


def test_snapshot_update_new_only_records_missing_snapshots_but_leaves_failing_ones(pytester: pytest.Pytester) -> None:
    setup(
        pytester,
        """
        from conftest import make_trace

        def test_old(genguard_snapshot):
            assert make_trace("test_old") == genguard_snapshot

        def test_new(genguard_snapshot):
            assert make_trace("test_new") == genguard_snapshot
        """,
    )
    run(pytester, "--snapshot-update", "-k", "test_old").assert_outcomes(passed=1, deselected=1)
    old = snapshot_path(pytester, "test_old")
    before = file_state(old)
    setup(pytester, "", test_old={"flip": "genuine"})
    pytester.makepyfile(
        test_gen="""
        from conftest import make_trace

        def test_old(genguard_snapshot):
            assert make_trace("test_old") == genguard_snapshot

        def test_new(genguard_snapshot):
            assert make_trace("test_new") == genguard_snapshot
        """
    )
    result = run(pytester, "--snapshot-update-new-only")
    result.assert_outcomes(passed=1, failed=1)
    assert snapshot_path(pytester, "test_new").exists()
    assert file_state(old) == before


def test_several_snapshots_in_one_test_are_stored_by_position_and_by_name(pytester: pytest.Pytester) -> None:
    setup(
        pytester,
        """
        from conftest import make_trace

        def test_many(genguard_snapshot):
            assert make_trace("a") == genguard_snapshot
            assert make_trace("b") == genguard_snapshot
            assert make_trace("c") == genguard_snapshot(name="greedy")
        """,
        b={"flip": "genuine"},
    )
    run(pytester, "--snapshot-update").assert_outcomes(passed=1)
    names = sorted(p.name for p in (pytester.path / "__snapshots__" / "test_gen").iterdir())
    assert names == ["test_many.1.genguard", "test_many.genguard", "test_many[greedy].genguard"]
    run(pytester).assert_outcomes(passed=1)


def test_data_other_than_traces_fails_with_a_type_error_that_says_what_is_accepted(pytester: pytest.Pytester) -> None:
    setup(
        pytester,
        """
        def test_dict(genguard_snapshot):
            assert {"tokens": [1, 2]} == genguard_snapshot
        """,
    )
    result = run(pytester, "--snapshot-update")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*TypeError: genguard_snapshot compares a GenerationTrace (from pytest_genguard.record()) or a "
            "GenerationRecorder history (recorder.history); use syrupy's plain `snapshot` fixture for other data; "
            "got dict"
        ]
    )
    assert not (pytester.path / "__snapshots__" / "test_gen").exists()
