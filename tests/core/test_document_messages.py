"""A snapshot with git merge-conflict markers says "merge conflict" and how to resolve it; a file that is not a
genguard trace says so, without advising to re-record it (``genguard show README.md``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trace_builder

from pytest_genguard import cli
from pytest_genguard.core.documents import Outcome, parse_document, stored_trace
from pytest_genguard.core.errors import TraceFormatError
from pytest_genguard.core.history import Checkpoint, RecorderHistory
from pytest_genguard.core.trace import GenerationTrace
from pytest_genguard.core.verdict import Rerecord, Status


def _trace(token: int) -> str:
    step = trace_builder.step([(token, -0.5), (9, -2.0)], text=f"t{token}", score=1.0)
    given = {"settings": {"mode": "greedy"}, "model": None, "tokenizer": None, "environment": {}}
    return trace_builder.trace([step], prompts=["hi"], finish="length", prompt_ids=(1,), **given).to_json()


def _conflicted() -> str:
    ours, theirs = _trace(3).splitlines(), _trace(4).splitlines()
    at = next(i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b)
    return "\n".join([*ours[:at], "<<<<<<< HEAD", ours[at], "=======", theirs[at], ">>>>>>> feature", *ours[at + 1 :]])


def test_a_file_with_merge_conflict_markers_says_merge_conflict_and_how_to_resolve_it() -> None:
    text = _conflicted()
    with pytest.raises(TraceFormatError) as caught:
        parse_document(text, "snap.genguard")
    message = str(caught.value)
    assert message.startswith("snap.genguard: unresolved git merge conflict (conflict markers from line ")
    assert "git checkout --ours or --theirs" in message and "pytest --snapshot-update" in message
    assert "corrupt" not in message


def test_a_lone_marker_like_line_is_not_a_conflict() -> None:
    with pytest.raises(TraceFormatError, match="not valid JSON"):
        parse_document(_trace(3) + "\n<<<<<<< HEAD\n", "snap.genguard")


def test_show_of_a_file_that_is_not_a_genguard_trace_says_so_without_advising_to_re_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, content in (("README.md", "# A project\n\nSome text.\n"), ("package.json", '{"name": "x"}\n')):
        path = tmp_path / name
        path.write_text(content)
        assert cli.main(["show", str(path)]) == 2
        err = capsys.readouterr().err
        assert f"{path}: not a genguard trace or recorder history" in err
        assert "--snapshot-update" not in err


def test_show_of_a_conflicted_snapshot_names_the_merge_conflict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "test_x.genguard"
    path.write_text(_conflicted())
    assert cli.main(["show", str(path)]) == 2
    assert "unresolved git merge conflict" in capsys.readouterr().err


def test_a_check_that_needs_a_trace_gets_it_or_the_invalid_outcome_and_refuses_a_history() -> None:
    """`stored_trace`: what verify() and the fidelity marker read a stored snapshot with."""
    text = _trace(3)
    got = stored_trace(text, "snap.genguard", Rerecord(), where="verify()", does="it checks traces")
    assert isinstance(got, GenerationTrace) and got.to_json() == text
    broken = stored_trace(_conflicted(), "snap.genguard", Rerecord(), where="verify()", does="it checks traces")
    assert isinstance(broken, Outcome) and broken.verdict is Status.INVALID and "merge conflict" in broken.detail
    history = RecorderHistory([Checkpoint(1, None, None, "step", GenerationTrace.from_json(text))]).to_json()
    with pytest.raises(TypeError, match=r"^verify\(\): snap.genguard holds a recorder history; it checks traces$"):
        stored_trace(history, "snap.genguard", Rerecord(), where="verify()", does="it checks traces")
