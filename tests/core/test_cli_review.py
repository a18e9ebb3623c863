"""`genguard review`: the pending traces a run kept, listed, accepted or rejected by flags, or one at a time with
keys; refused, with the reason and a non-zero exit, when accepting would not be safe; a clear error without a
terminal or with IDs that name nothing. (The real terminal is in tests/plugin/test_review_end_to_end.py.)"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import trace_builder
from rich.console import Console

from pytest_genguard import cli
from pytest_genguard.cli.review import accept, reject
from pytest_genguard.cli.review_screen import interactive
from pytest_genguard.core.change import change_of
from pytest_genguard.core.compare import compare
from pytest_genguard.core.files import write_snapshot
from pytest_genguard.core.pending import PendingStore
from pytest_genguard.core.trace import GenerationTrace

VOCAB = {0: "<|endoftext|>", 3: " brown", 4: " fox", 5: " dog", 6: " cat"}
TESTS = ("test_a", "test_b", "test_c")


def make(path: list[int]) -> GenerationTrace:
    steps = [trace_builder.step([(t, -0.1), (5 if t != 5 else 4, -3.0)], text=VOCAB) for t in path]
    return trace_builder.trace(steps, prompts=["the quick"], finish=None)


def file_of(test: str) -> str:
    return f"tests/__snapshots__/test_gen/{test}.genguard"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Three committed snapshots, each with a pending trace that changes step 1; run from a subfolder."""
    old, new = make([3, 4, 0]), make([3, 5, 0])
    for test in TESTS:
        write_snapshot(tmp_path / file_of(test), old.to_json())
        PendingStore(tmp_path).keep(
            new.to_json(),
            old.to_json(),
            test=f"tests/test_gen.py::{test}",
            name=test,
            file=file_of(test),
            compared=file_of(test),
            verdict="regression",
            summary="regression: prompt 0 'the quick' diverges at step 1",
            changes=("prompt 0 'the quick' diverges at step 1",),
            change=change_of(compare(old, new)).to_json(),
        )
    (tmp_path / "tests").mkdir(exist_ok=True)
    monkeypatch.chdir(tmp_path / "tests")  # the nearest folder up holding .genguard/ is the project's
    for name in ("NO_COLOR", "FORCE_COLOR", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def snapshot(root: Path, test: str) -> str:
    return (root / file_of(test)).read_text(encoding="utf-8")


def ids(root: Path) -> list[str]:
    return [e.id for e in PendingStore(root).entries()]


def test_list_names_each_pending_trace_and_where_it_changed(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["review", "--list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("3 pending in ")
    for line, test, pid in zip(out[1:], TESTS, ids(project), strict=True):
        assert line == (
            f"{pid}  tests/test_gen.py::{test}  regression: 1 of 1 prompt changed path; first at prompt 0 step 1: "
            "' fox' -> ' dog'"
        )


def test_accept_writes_exactly_the_snapshots_it_names(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = ids(project)[0]
    assert cli.main(["review", "--accept", first, "tests/test_gen.py::test_c"]) == 0
    out = capsys.readouterr().out
    assert f"accepted {first}: tests/test_gen.py::test_a -> {file_of('test_a')} (was regression)" in out
    assert snapshot(project, "test_a") == snapshot(project, "test_c") == make([3, 5, 0]).to_json()
    assert snapshot(project, "test_b") == make([3, 4, 0]).to_json()
    assert len(ids(project)) == 1


def test_an_unknown_id_changes_nothing_and_names_what_is_pending(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = ids(project)[0]
    assert cli.main(["review", "--accept", first, "deadbeef"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("genguard review: no pending trace deadbeef in ")
    assert ", ".join(ids(project)) in err and "genguard review --list" in err
    assert snapshot(project, "test_a") == make([3, 4, 0]).to_json()  # not even the known one


def test_a_refused_accept_exits_1_and_leaves_the_snapshot(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_snapshot(project / file_of("test_b"), make([3, 4, 4]).to_json())
    assert cli.main(["review", "--accept-all"]) == 1
    captured = capsys.readouterr()
    assert "tests/test_gen.py::test_b) not accepted: " in captured.err and "changed since the run" in captured.err
    assert snapshot(project, "test_b") == make([3, 4, 4]).to_json()
    assert snapshot(project, "test_a") == make([3, 5, 0]).to_json()  # the others were accepted
    assert len(ids(project)) == 1


def test_reject_all_leaves_nothing_pending_and_every_snapshot_as_it_was(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["review", "--reject-all"]) == 0
    assert capsys.readouterr().out.count("rejected ") == 3
    assert ids(project) == []
    assert all(snapshot(project, t) == make([3, 4, 0]).to_json() for t in TESTS)
    assert cli.main(["review", "--list"]) == 0
    assert capsys.readouterr().out.startswith("no pending traces in ")


def test_without_a_terminal_or_a_flag_it_says_which_flags_to_pass(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["review"]) == 2  # pytest's captured stdin and stdout are no terminal
    assert capsys.readouterr().err == (
        "genguard review: no terminal to review on (standard input or output is not a terminal): pass --list, "
        "--accept ID..., --reject ID..., --accept-all or --reject-all\n"
    )


@pytest.mark.parametrize("argv", [["--list", "--accept", "x"], ["--reject-all", "--reject", "x"]])
def test_listing_or_all_do_not_go_with_ids(project: Path, argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["review", *argv]) == 2
    assert "do not go with --list, --accept-all or --reject-all" in capsys.readouterr().err


def test_root_names_the_project(
    project: Path,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    (elsewhere / "pyproject.toml").write_text("")  # another project: the search stops at its folder
    monkeypatch.chdir(elsewhere)
    assert cli.main(["review", "--list"]) == 0
    assert capsys.readouterr().out.startswith("no pending traces in ")
    assert cli.main(["review", "--list", "--root", str(project)]) == 0
    assert capsys.readouterr().out.startswith("3 pending in ")


def test_an_empty_pending_folder_nearer_does_not_hide_the_runs_traces(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """pytest may put the rootdir above where it started (an option's existing path counts as an argument): the
    nearest folder holding pending traces is the project's, not a nearer one left empty by an earlier review."""
    nearer = project / "tests" / "sub"
    (nearer / ".genguard" / "pending").mkdir(parents=True)
    monkeypatch.chdir(nearer)
    assert cli.main(["review", "--list"]) == 0
    assert capsys.readouterr().out.startswith(f"3 pending in {project / '.genguard' / 'pending'}")


def test_keys_accept_skip_switch_the_view_and_quit(project: Path) -> None:
    keys = iter("vvasvq")  # view old, view new; accept the first; skip the second; view; quit on the third
    shown = io.StringIO()
    screen = Console(file=shown, width=140, color_system=None)
    code = interactive(PendingStore(project), accept, reject, key=keys.__next__, out=screen)
    assert code == 0
    text = shown.getvalue()
    screens = text.split("[a] accept")
    assert "view: side by side" in screens[0] and ">>     1  old       ' fox'" in screens[0]
    assert ">>        new       ' dog'" in screens[0]  # both paths at the split
    assert "view: old" in screens[1] and " new " not in screens[1].split("view: old")[1]
    assert "view: new" in screens[2] and ">>     1  new       ' dog'" in screens[2]
    assert "[1/3] tests/test_gen.py::test_a" in text and "[2/3] tests/test_gen.py::test_b" in text
    assert "regression: prompt 0 'the quick' diverges at step 1" in text
    assert "prompts changed: 1 of 1 changed path, 0 drifted in value, 0 near ties" in text
    assert text.rstrip().endswith("accepted 1, rejected 0, skipped 1; 2 traces still pending (genguard review --list)")
    assert snapshot(project, "test_a") == make([3, 5, 0]).to_json()
    assert snapshot(project, "test_b") == snapshot(project, "test_c") == make([3, 4, 0]).to_json()
    assert len(ids(project)) == 2


def test_a_split_after_a_value_drift_is_shown_where_the_tokens_split(tmp_path: Path) -> None:
    """As on SmolLM2 with a layer scaled: step 0's logprob drifts (the first divergence), the tokens split later."""
    step = trace_builder.step
    path = [3, 4, 6, 3, 4, 6, 3, 4, 0]
    old = trace_builder.trace([step([(t, -0.1), (5, -3.0)], text=VOCAB) for t in path], finish=None)
    drifted = [
        step([(3, -0.4), (5, -3.0)], text=VOCAB),
        *old.prompts[0].steps[1:7],
        step([(5, -0.1), (4, -3.0)], text=VOCAB),
    ]
    new = trace_builder.trace(drifted, finish=None)
    write_snapshot(tmp_path / file_of("test_a"), old.to_json())
    store = PendingStore(tmp_path)
    store.keep(
        new.to_json(),
        old.to_json(),
        test="t.py::test_a",
        name="test_a",
        file=file_of("test_a"),
        compared=file_of("test_a"),
        verdict="stale",
        summary="stale: model changed",
    )
    shown = io.StringIO()
    interactive(store, accept, reject, key=iter("q").__next__, out=Console(file=shown, width=140, color_system=None))
    text = shown.getvalue()
    assert ">>     0  old       ' brown'" in text  # the first divergence, a drift
    assert "the path splits at step 7 of prompt 0:" in text
    assert ">>     7  old       ' fox'" in text and ">>        new       ' dog'" in text
