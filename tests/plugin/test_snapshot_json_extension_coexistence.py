"""genguard snapshot files survive a module that also uses syrupy's JSONSnapshotExtension (and skipped tests), through
repeated --snapshot-update runs; the negative control shows the ``.trace.json`` naming these files avoid is deleted."""

from __future__ import annotations

import pytest
from snapshot_support import N2, file_state, run, setup

MIXED = """
import pytest
from syrupy.extensions.json import JSONSnapshotExtension
from conftest import make_trace

SKIP = {skip}

@pytest.fixture
def json_snapshot(snapshot):
    return snapshot.use_extension(JSONSnapshotExtension)

def test_greedy(genguard_snapshot, json_snapshot):
    assert make_trace("test_greedy") == genguard_snapshot
    assert {{"tokens": [10, 20, 30]}} == json_snapshot

def test_plain_json(json_snapshot):
    assert {{"a": 1}} == json_snapshot

def test_plain_amber(snapshot):
    assert [1, 2, 3] == snapshot

@pytest.mark.skipif(SKIP, reason="skipped on purpose")
def test_sometimes_skipped(genguard_snapshot):
    assert make_trace("test_sometimes_skipped") == genguard_snapshot
"""

FILES = [
    "__snapshots__/test_gen.ambr",
    "__snapshots__/test_gen/test_greedy.genguard",
    "__snapshots__/test_gen/test_greedy.json",
    "__snapshots__/test_gen/test_plain_json.json",
    "__snapshots__/test_gen/test_sometimes_skipped.genguard",
]


def _files(pytester: pytest.Pytester) -> list[str]:
    root = pytester.path / "__snapshots__"
    return sorted(str(p.relative_to(pytester.path)) for p in root.rglob("*") if p.is_file())


def test_genguard_files_survive_repeated_snapshot_updates_next_to_json_snapshots(pytester: pytest.Pytester) -> None:
    setup(pytester, MIXED.format(skip=False))
    run(pytester, "--snapshot-update").assert_outcomes(passed=4)
    assert _files(pytester) == FILES
    states = {name: file_state(pytester.path / name) for name in FILES}

    pytester.makepyfile(test_gen=MIXED.format(skip=True))
    for xdist in ((), N2):  # unused detection runs in the process, or on the xdist controller from worker reports
        result = run(pytester, "--snapshot-update", *xdist)
        result.assert_outcomes(passed=3, skipped=1)
        assert "deleted" not in result.stdout.str()
    assert _files(pytester) == FILES
    assert {name: file_state(pytester.path / name) for name in FILES} == states

    checked = run(pytester)
    checked.assert_outcomes(passed=3, skipped=1)
    assert "unused" not in checked.stdout.str()


def test_negative_control_a_trace_json_suffix_is_deleted_by_the_json_extension(pytester: pytest.Pytester) -> None:
    setup(
        pytester,
        """
        import pytest
        from syrupy.extensions.json import JSONSnapshotExtension
        from pytest_genguard.plugin.snapshot import GenguardSnapshotExtension
        from conftest import make_trace

        class TraceJsonExtension(GenguardSnapshotExtension):
            file_extension = "trace.json"

        def test_greedy(snapshot):
            assert make_trace("test_greedy") == snapshot.use_extension(TraceJsonExtension)
            assert {"tokens": [10, 20, 30]} == snapshot.use_extension(JSONSnapshotExtension)
        """,
    )
    result = run(pytester, "--snapshot-update")
    result.assert_outcomes(passed=1)
    # The JSON extension reads test_greedy.trace.json as its own snapshot "test_greedy.trace", which no test uses.
    result.stdout.fnmatch_lines(["*2 snapshots generated. 1 unused snapshot deleted.*"])
    assert not (pytester.path / "__snapshots__" / "test_gen" / "test_greedy.trace.json").exists()
    assert (pytester.path / "__snapshots__" / "test_gen" / "test_greedy.json").exists()
