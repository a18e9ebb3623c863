"""--snapshot-update deletes only the snapshots of tests that no longer exist: a test that failed, errored or was
skipped before its assertion keeps its snapshot, and so do tests that did not run (-x, Ctrl-C) and the tests of a
module that failed to import; the summary says which were kept. The negative controls: the snapshot of a removed test
and the snapshot of an assertion a passing test no longer makes are still deleted."""

from __future__ import annotations

import pytest
from snapshot_support import QUIET, XDIST, file_state, run, setup

TESTS = """
import pathlib

import pytest
from conftest import make_trace

PHASE = (pathlib.Path(__file__).parent / "phase.txt").read_text().strip()


@pytest.fixture
def broken():
    if PHASE == "check":
        raise RuntimeError("a fixture broke")


def test_passes(genguard_snapshot):
    assert make_trace("test_passes") == genguard_snapshot


def test_fails(genguard_snapshot):
    if PHASE == "check":
        raise RuntimeError("failed before its assertion")
    assert make_trace("test_fails") == genguard_snapshot


def test_errors(broken, genguard_snapshot):
    assert make_trace("test_errors") == genguard_snapshot


def test_skipped(genguard_snapshot):
    if PHASE == "check":
        pytest.skip("skipped before its assertion")
    assert make_trace("test_skipped") == genguard_snapshot


@pytest.mark.parametrize("case", ["a", "b"])
def test_param(case, genguard_snapshot):
    if PHASE == "check" and case == "a":
        raise RuntimeError("one case failed")
    assert make_trace("test_param") == genguard_snapshot


class TestGroup:
    def test_in_class(self, genguard_snapshot):
        if PHASE == "check":
            raise RuntimeError("failed before its assertion")
        assert make_trace("test_in_class") == genguard_snapshot


def test_two(genguard_snapshot):
    assert make_trace("test_two") == genguard_snapshot
    if PHASE == "record":  # the check phase no longer makes the second assertion: test_two.1 may go
        assert make_trace("test_two") == genguard_snapshot


if PHASE == "record":  # removed in the check phase: its snapshot may go

    def test_removed(genguard_snapshot):
        assert make_trace("test_removed") == genguard_snapshot
"""

ALL = [
    "TestGroup.test_in_class",
    "test_errors",
    "test_fails",
    "test_param[a]",
    "test_param[b]",
    "test_passes",
    "test_removed",
    "test_skipped",
    "test_two",
    "test_two.1",
]
NOT_REACHED = ["TestGroup.test_in_class", "test_errors", "test_fails", "test_param[a]", "test_skipped"]


def _names(pytester: pytest.Pytester, module: str = "test_gen") -> list[str]:
    folder = pytester.path / "__snapshots__" / module
    return sorted(p.name.removesuffix(".genguard") for p in folder.glob("*.genguard")) if folder.exists() else []


def _recorded(pytester: pytest.Pytester) -> dict[str, tuple[bytes, int]]:
    setup(pytester, TESTS)
    (pytester.path / "phase.txt").write_text("record")
    run(pytester, "--snapshot-update").assert_outcomes(passed=9)
    assert _names(pytester) == ALL
    (pytester.path / "phase.txt").write_text("check")
    folder = pytester.path / "__snapshots__" / "test_gen"
    return {name: file_state(folder / f"{name}.genguard") for name in NOT_REACHED}


@XDIST
def test_tests_that_did_not_reach_their_assertion_keep_their_snapshots_and_removed_tests_lose_theirs(
    pytester: pytest.Pytester, xdist: list[str]
) -> None:
    before = _recorded(pytester)
    result = run(pytester, "--snapshot-update", *xdist)
    result.assert_outcomes(passed=3, failed=3, errors=1, skipped=1)
    # kept, byte for byte: failed, errored, skipped, and one failing case of a parametrized test
    assert _names(pytester) == sorted([*NOT_REACHED, "test_param[b]", "test_passes", "test_two"])
    folder = pytester.path / "__snapshots__" / "test_gen"
    assert {name: file_state(folder / f"{name}.genguard") for name in NOT_REACHED} == before
    out = result.stdout.str()
    assert (
        "kept 5 snapshots of tests that did not reach their assertion (failed, errored or skipped); -v names them"
        in out
    )
    assert "(--snapshot-update deletes only the snapshots of tests that no longer exist)" in out
    # the negative controls: a removed test and a dropped assertion of a passing test are still cleaned up
    result.stdout.fnmatch_lines(["*2 unused snapshots deleted*"])
    assert "Deleted test_removed (__snapshots__/test_gen/test_removed.genguard)" in out
    assert "Deleted test_two.1 (__snapshots__/test_gen/test_two.1.genguard)" in out


def test_with_v_the_summary_names_each_kept_snapshot_and_its_test(pytester: pytest.Pytester) -> None:
    _recorded(pytester)
    result = run(pytester, "--snapshot-update", "-v")
    result.stdout.fnmatch_lines(
        [
            "kept 5 snapshots of tests that did not reach their assertion (failed, errored or skipped)",
            "  __snapshots__/test_gen/TestGroup.test_in_class.genguard (test_gen.py::TestGroup::test_in_class: failed)",
            "  __snapshots__/test_gen/test_errors.genguard (test_gen.py::test_errors: errored)",
            "  __snapshots__/test_gen/test_fails.genguard (test_gen.py::test_fails: failed)",
            "  __snapshots__/test_gen/test_param[a].genguard (test_gen.py::test_param[a]: failed)",
            "  __snapshots__/test_gen/test_skipped.genguard (test_gen.py::test_skipped: skipped)",
            "(--snapshot-update deletes only the snapshots of tests that no longer exist)",
        ]
    )


def test_a_plain_run_does_not_report_snapshots_of_failed_tests_as_unused(pytester: pytest.Pytester) -> None:
    """syrupy used to call them unused, fail the run for it and advise --snapshot-update, which deleted them."""
    _recorded(pytester)
    result = run(pytester)
    result.assert_outcomes(passed=3, failed=3, errors=1, skipped=1)
    out = result.stdout.str()
    assert "test_fails" not in out.split("snapshot report summary", 1)[1].split("short test summary", 1)[0]
    assert "2 snapshots unused" in out  # test_removed and test_two.1: really unused
    assert "kept" not in out  # nothing would have been deleted: nothing to report


@XDIST
def test_under_x_the_tests_after_the_first_failure_keep_their_snapshots(
    pytester: pytest.Pytester, xdist: list[str]
) -> None:
    _recorded(pytester)
    result = run(pytester, "--snapshot-update", "-x", *xdist)
    assert result.ret in (pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.INTERRUPTED)  # xdist: "Interrupted"
    kept = set(_names(pytester))
    assert {"test_fails", "test_param[a]", "test_param[b]", "test_skipped", "test_two", "test_two.1"} <= kept
    assert "test_removed" not in kept  # a test that no longer exists: deleted even in a stopped run
    result.stdout.fnmatch_lines(["kept * snapshots of tests that did not run (the run stopped early); -v names them"])


def test_after_ctrl_c_the_tests_that_did_not_run_keep_their_snapshots(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _recorded(pytester)
    pytester.makepyfile(
        test_gen=TESTS.replace(
            'raise RuntimeError("failed before its assertion")', "raise KeyboardInterrupt  # the user pressed Ctrl-C"
        )
    )
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)
    # A subprocess: in process, pytester hands the KeyboardInterrupt on to the outer run.
    result = pytester.runpytest_subprocess(*QUIET, "--snapshot-update")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert set(_names(pytester)) >= set(ALL) - {"test_removed"}
    result.stdout.fnmatch_lines(["kept * snapshots of tests that did not run (the run stopped early)*"])


@XDIST
def test_a_module_that_fails_to_import_loses_no_snapshot_of_any_module(
    pytester: pytest.Pytester, xdist: list[str]
) -> None:
    _recorded(pytester)
    pytester.makepyfile(
        test_other="from conftest import make_trace\n\ndef test_o(genguard_snapshot):\n"
        "    assert make_trace('test_o') == genguard_snapshot\n"
    )
    (pytester.path / "phase.txt").write_text("record")
    run(pytester, "--snapshot-update").assert_outcomes(passed=10)
    (pytester.path / "test_other.py").write_text("import this_module_does_not_exist\n")
    result = run(pytester, "--snapshot-update", *xdist)
    assert result.ret != pytest.ExitCode.OK
    assert _names(pytester, "test_other") == ["test_o"]
    assert set(_names(pytester)) >= set(ALL) - {"test_removed"}
    result.stdout.fnmatch_lines(["kept 1 snapshot of test modules that failed to collect*"])


@XDIST
def test_a_module_skipped_as_a_whole_keeps_its_snapshots(pytester: pytest.Pytester, xdist: list[str]) -> None:
    """pytest.importorskip at the top of a module (an optional dependency missing on this machine) leaves pytest
    with no test item of that module: its snapshots looked like those of removed tests."""
    _recorded(pytester)
    module = "import pytest\nfrom conftest import make_trace\n{skip}\ndef test_o(genguard_snapshot):\n"
    module += "    assert make_trace('test_o') == genguard_snapshot\n"
    pytester.makepyfile(test_other=module.format(skip=""))
    run(pytester, "--snapshot-update").assert_outcomes(passed=4, failed=3, errors=1, skipped=1)
    assert _names(pytester, "test_other") == ["test_o"]
    pytester.makepyfile(test_other=module.format(skip='pytest.importorskip("a_module_this_machine_lacks")'))
    result = run(pytester, "--snapshot-update", "-v", *xdist)
    assert _names(pytester, "test_other") == ["test_o"]
    result.stdout.fnmatch_lines(["  __snapshots__/test_other/test_o.genguard (its module was skipped)"])


MIXED = """
import pathlib

from conftest import make_trace

PHASE = (pathlib.Path(__file__).parent / "phase.txt").read_text().strip()


def test_amber(snapshot):
    assert {"plain": "syrupy data"} == snapshot


def test_gen(genguard_snapshot):
    if PHASE == "check":
        raise RuntimeError("failed before its assertion")
    assert make_trace("test_gen") == genguard_snapshot
"""


@pytest.mark.parametrize("amber", [True, False], ids=["next-to-amber-snapshots", "no-genguard-assertion-ran"])
def test_no_other_extension_deletes_a_genguard_file_as_an_unknown_file(pytester: pytest.Pytester, amber: bool) -> None:
    """syrupy's default (amber) extension claims every file under __snapshots__ it does not know as an orphan; it
    is also the extension syrupy scans with when no assertion ran at all."""
    module = MIXED if amber else MIXED.replace("def test_amber(snapshot):", "def _unused(snapshot):")
    setup(pytester, module)
    (pytester.path / "phase.txt").write_text("record")
    run(pytester, "--snapshot-update").assert_outcomes(passed=2 if amber else 1)
    (pytester.path / "phase.txt").write_text("check")
    result = run(pytester, "--snapshot-update")
    result.assert_outcomes(passed=1 if amber else 0, failed=1)
    assert _names(pytester) == ["test_gen"]
    assert "deleted" not in result.stdout.str()
