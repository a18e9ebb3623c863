"""Write failures are reported when and where they happen: a snapshot that cannot be written fails its test with the
OS error and the path (it used to read "does not exist ... record it with: pytest --snapshot-update", the command
just run); an HTML report path that cannot be written is a usage error at start-up, and a report that cannot be
written at the end fails the run.

Read-only folders are made read-only for real (tests/support/readonly_support.py: a normal user, or root without the
capabilities that bypass permission bits); a folder with a regular file in its place fails for any user."""

from __future__ import annotations

import os

import pytest
import snapshot_support
from readonly_support import run_read_only
from snapshot_support import ONE_TEST, XDIST, file_state, run, set_variants, setup, snapshot_path
from test_baselines_option import BF16, per_env_setup


@pytest.mark.parametrize("existing", [True, False], ids=["update", "create"])
def test_a_read_only_snapshot_folder_fails_the_update_naming_the_os_error_and_the_file(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, existing: bool
) -> None:
    setup(pytester, ONE_TEST)
    run(pytester, "--snapshot-update").assert_outcomes(passed=1)
    path = snapshot_path(pytester, "test_greedy")
    if existing:
        set_variants(pytester, test_greedy={"drift": 0.5})  # a regression: --snapshot-update rewrites it
        before = file_state(path)
    else:
        path.unlink()
    path.parent.chmod(0o555)
    try:
        result = run_read_only(pytester, monkeypatch, "--snapshot-update")
    finally:
        path.parent.chmod(0o755)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "E  *genguard snapshot 'test_greedy' could not be written to __snapshots__/test_gen/test_greedy.genguard: "
            "PermissionError: ?Errno 13? Permission denied: *",
            "E  *nothing was written (a snapshot already there is unchanged); make the folder writable (or free "
            "space) and run the same command again",
        ]
    )
    out = result.stdout.str()
    assert "does not exist" not in out and "record it with" not in out
    result.stdout.fnmatch_lines(["snapshots: * 1 not written (write error)"])
    assert "updated" not in out and "generated" not in out
    if existing:
        assert file_state(path) == before
    else:
        assert not path.exists()
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]  # no temporary file left


@XDIST
def test_a_snapshot_folder_that_is_a_file_fails_the_test_with_the_os_error(
    pytester: pytest.Pytester, xdist: list[str]
) -> None:
    setup(pytester, ONE_TEST)
    (pytester.path / "__snapshots__").mkdir()
    (pytester.path / "__snapshots__" / "test_gen").write_text("a file where the folder goes")
    result = run(pytester, "--snapshot-update", *xdist)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "E  *genguard snapshot 'test_greedy' could not be written to "
            "__snapshots__/test_gen/test_greedy.genguard: *",
            "E  *nothing was written: __snapshots__/test_gen is a file where genguard keeps a folder of snapshots; "
            "move or delete that file and run the same command again",
        ]
    )
    assert "does not exist" not in result.stdout.str()
    assert "make the folder writable" not in result.stdout.str()  # before (issue 33): no permission is at fault


def test_a_per_env_baseline_that_cannot_be_written_fails_naming_the_os_error_and_the_file(
    pytester: pytest.Pytester,
) -> None:
    per_env_setup(pytester, test_greedy=BF16)
    (pytester.path / "__genguard_baselines__").write_text("a file where the folder goes")
    result = snapshot_support.run(pytester, "--genguard-baselines", "per-env", "--snapshot-update")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "E  *genguard snapshot 'test_greedy' could not be written to "
            "__genguard_baselines__/cpu-bfloat16/test_gen/test_greedy.genguard: *Error: *",
            "E  *nothing was written: __genguard_baselines__ is a file where genguard keeps a folder of snapshots; "
            "move or delete that file and run the same command again",
        ]
    )


NEVER = "def test_never():\n    raise AssertionError('must not run: the options were checked at start-up')\n"


@pytest.mark.parametrize("where", ["folder", "under-a-file"])
def test_a_report_path_that_cannot_be_written_is_a_usage_error_at_start_up(
    pytester: pytest.Pytester, where: str
) -> None:
    pytester.makepyfile(NEVER)
    (pytester.path / "reports").mkdir()
    (pytester.path / "notes.txt").write_text("a file")
    target = "reports" if where == "folder" else "notes.txt/report.html"
    result = pytester.runpytest("-p", "no:cacheprovider", "--genguard-report", target)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    reason = "is a folder" if where == "folder" else f"{pytester.path / 'notes.txt'} is a file, not a folder"
    result.stderr.fnmatch_lines(
        [
            f"ERROR: --genguard-report {target}: *{reason}; name an HTML file in a folder you can "
            "write, e.g. --genguard-report genguard-report.html"
        ]
    )


def test_a_report_in_a_read_only_folder_is_a_usage_error_at_start_up(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(NEVER)
    folder = pytester.path / "reports"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        result = run_read_only(pytester, monkeypatch, "--genguard-report", "reports/r.html")
    finally:
        folder.chmod(0o755)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"ERROR: --genguard-report reports/r.html: cannot write in {folder} (*Permission denied*); name an HTML *"]
    )


def test_a_report_that_cannot_be_written_at_the_end_fails_the_run(pytester: pytest.Pytester) -> None:
    """Checked at start-up, but the folder can still go away during the run (here: a test replaces it by a file)."""
    pytester.makepyfile(
        """
        import shutil, pathlib

        def test_removes_the_report_folder():
            shutil.rmtree("reports")
            pathlib.Path("reports").write_text("now a file")
        """
    )
    (pytester.path / "reports").mkdir()
    result = pytester.runpytest("-p", "no:cacheprovider", "--genguard-report", "reports/r.html")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([f"genguard: could not write the HTML report to {pytester.path}/reports/r.html: *"])
    assert os.path.isfile(pytester.path / "reports")


def test_a_snapshot_that_cannot_be_read_fails_its_test_naming_the_os_error_and_is_left_alone(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    setup(pytester, ONE_TEST)
    run(pytester, "--snapshot-update").assert_outcomes(passed=1)
    path = snapshot_path(pytester, "test_greedy")
    before = file_state(path)
    path.chmod(0o000)
    try:
        result = run_read_only(pytester, monkeypatch, "--snapshot-update")
    finally:
        path.chmod(0o644)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "E  *genguard snapshot 'test_greedy' cannot be read (__snapshots__/test_gen/test_greedy.genguard): "
            "PermissionError: ?Errno 13? Permission denied: *",
            "snapshots: * 1 unreadable",
        ]
    )
    assert file_state(path) == before


def test_a_folder_where_the_snapshot_file_goes_fails_its_test_naming_the_os_error(pytester: pytest.Pytester) -> None:
    setup(pytester, ONE_TEST)
    snapshot_path(pytester, "test_greedy").mkdir(parents=True)
    result = run(pytester, "--snapshot-update")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "E  *genguard snapshot 'test_greedy' cannot be read (__snapshots__/test_gen/test_greedy.genguard): "
            "IsADirectoryError: *"
        ]
    )
    assert snapshot_path(pytester, "test_greedy").is_dir()
