"""Pending traces (`core.pending`): kept beside the project in a folder git ignores, accepted only while the snapshot
is the one the trace was compared with, written by the one write of every snapshot, and refused with a reason for
every way accepting would not be safe (each refusal has its control: the same store accepts once the cause is gone).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import trace_builder

from pytest_genguard.core.change import Change, change_of
from pytest_genguard.core.compare import compare
from pytest_genguard.core.files import write_snapshot
from pytest_genguard.core.markdown import Row, RunSummary, embed, extract, render_markdown
from pytest_genguard.core.pending import GITIGNORE, Accepted, Broken, Pending, PendingStore, pending_id, select
from pytest_genguard.core.trace import GenerationTrace

VOCAB = {0: "<|endoftext|>", 3: " brown", 4: " fox", 5: " dog"}
FILE = "tests/__snapshots__/test_gen/test_fox.genguard"


def make(path: list[int], *, logprob: float = -0.1) -> GenerationTrace:
    steps = [trace_builder.step([(t, logprob), (5 if t != 5 else 4, -3.0)], text=VOCAB) for t in path]
    return trace_builder.trace(steps, prompts=["the quick"], finish=None)


def kept(root: Path, old: GenerationTrace, new: GenerationTrace, **extra: object) -> Pending:
    """A committed snapshot `old` at FILE and `new` kept as its pending trace."""
    write_snapshot(root / FILE, old.to_json())
    fields: dict[str, object] = {
        "test": "tests/test_gen.py::test_fox",
        "name": "test_fox",
        "file": FILE,
        "compared": FILE,
        "verdict": "regression",
        "summary": "regression: prompt 0 diverges at step 1",
        "changes": ("prompt 0 'the quick' diverges at step 1",),
        **extra,
    }
    return PendingStore(root).keep(new.to_json(), old.to_json(), **fields)


def test_a_kept_trace_lives_under_an_ignored_folder_named_by_its_snapshot_file(tmp_path: Path) -> None:
    record = kept(tmp_path, make([3, 4, 0]), make([3, 5, 0]))
    assert record.id == pending_id(FILE)
    folder = tmp_path / ".genguard" / "pending"
    assert (folder / f"{record.id}.genguard").read_text(encoding="utf-8") == make([3, 5, 0]).to_json()
    assert json.loads((folder / f"{record.id}.json").read_text(encoding="utf-8"))["file"] == FILE
    assert (tmp_path / ".genguard" / ".gitignore").read_text(encoding="utf-8") == GITIGNORE
    # git agrees: nothing under .genguard is shown, while another new file is
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "new.txt").write_text("x")
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"], cwd=tmp_path, capture_output=True, text=True
    )
    shown = status.stdout.splitlines()
    assert "?? new.txt" in shown and f"?? {FILE}" in shown  # git shows new files, the snapshot among them
    assert not [line for line in shown if line[3:].startswith(".genguard/")]
    (tmp_path / ".genguard" / ".gitignore").unlink()  # control: without its .gitignore git shows the folder
    status = subprocess.run(["git", "status", "--porcelain"], cwd=tmp_path, capture_output=True, text=True)
    assert "?? .genguard/" in status.stdout.splitlines()


def test_accepting_writes_the_pending_text_over_the_snapshot_and_removes_the_pair(tmp_path: Path) -> None:
    record = kept(tmp_path, make([3, 4, 0]), make([3, 5, 0]))
    store = PendingStore(tmp_path)
    done = store.accept(record)
    assert isinstance(done, Accepted)
    assert (tmp_path / FILE).read_bytes() == make([3, 5, 0]).to_json().encode()
    assert done.lines == (
        f"tests/test_gen.py::test_fox -> {FILE} (was regression)",
        "  prompt 0 'the quick' diverges at step 1",
    )
    assert store.entries() == []


def test_a_snapshot_changed_since_the_comparison_is_not_overwritten(tmp_path: Path) -> None:
    record = kept(tmp_path, make([3, 4, 0]), make([3, 5, 0]))
    store = PendingStore(tmp_path)
    write_snapshot(tmp_path / FILE, make([3, 4, 4]).to_json())  # a checkout brought another snapshot
    refused = store.accept(record)
    assert isinstance(refused, list)
    assert refused[0].startswith(f"{FILE} changed since the run that kept this trace compared with it")
    assert "pytest tests/test_gen.py::test_fox" in refused[0]
    assert (tmp_path / FILE).read_text(encoding="utf-8") == make([3, 4, 4]).to_json()
    # control: the snapshot back as it was, the same record is accepted
    write_snapshot(tmp_path / FILE, make([3, 4, 0]).to_json())
    assert isinstance(store.accept(record), Accepted)


def test_a_deleted_snapshot_is_refused_too(tmp_path: Path) -> None:
    record = kept(tmp_path, make([3, 4, 0]), make([3, 5, 0]))
    (tmp_path / FILE).unlink()
    refused = PendingStore(tmp_path).accept(record)
    assert isinstance(refused, list) and f"{FILE} was deleted since" in refused[0]
    assert not (tmp_path / FILE).exists()


def test_an_edited_pending_trace_is_refused(tmp_path: Path) -> None:
    record = kept(tmp_path, make([3, 4, 0]), make([3, 5, 0]))
    trace_file = tmp_path / ".genguard" / "pending" / f"{record.id}.genguard"
    trace_file.write_text(make([3, 3, 0]).to_json(), encoding="utf-8")
    refused = PendingStore(tmp_path).accept(record)
    assert isinstance(refused, list) and "is not the one its record vouches for" in refused[0]
    assert (tmp_path / FILE).read_text(encoding="utf-8") == make([3, 4, 0]).to_json()


def test_a_record_that_names_another_file_than_its_id_is_refused(tmp_path: Path) -> None:
    record = kept(tmp_path, make([3, 4, 0]), make([3, 5, 0]))
    other = "tests/__snapshots__/test_gen/test_other.genguard"
    moved = Pending(**{**record.__dict__, "file": other, "compared": other})
    refused = PendingStore(tmp_path).refusal(moved)
    assert refused is not None and "the record was copied or edited" in refused[0]
    assert PendingStore(tmp_path).refusal(record) is None  # control


def test_nan_in_a_pending_trace_is_refused_unless_the_test_opted_in(tmp_path: Path) -> None:
    bad = make([3, 5, 0], logprob=float("nan"))
    record = kept(tmp_path, make([3, 4, 0]), bad)
    refused = PendingStore(tmp_path).refusal(record)
    assert refused is not None and "the pending trace holds 9 non-finite values" in refused[0]
    assert refused[0].endswith("it was not accepted")
    allowed = kept(tmp_path, make([3, 4, 0]), bad, allow_nonfinite=True)
    assert PendingStore(tmp_path).refusal(allowed) is None


def test_a_pending_text_that_is_not_a_trace_is_refused(tmp_path: Path) -> None:
    record = kept(tmp_path, make([3, 4, 0]), make([3, 5, 0]))
    store = PendingStore(tmp_path)
    broken = store.keep('{"schema": 1, "prompts": [', make([3, 4, 0]).to_json(), **_fields(record))
    refused = store.refusal(broken)
    assert refused is not None and f"pending trace {broken.id}.genguard" in refused[0]


def _fields(record: Pending) -> dict[str, object]:
    keep = ("test", "name", "file", "compared", "verdict", "summary", "changes")
    return {k: getattr(record, k) for k in keep}


def test_a_per_env_fallback_records_that_the_baseline_did_not_exist(tmp_path: Path) -> None:
    own = "tests/__genguard_baselines__/cpu-float32/test_gen/test_fox.genguard"
    write_snapshot(tmp_path / FILE, make([3, 4, 0]).to_json())
    store = PendingStore(tmp_path)
    fields = {**_fields(kept(tmp_path, make([3, 4, 0]), make([3, 5, 0]))), "file": own, "compared": FILE}
    record = store.keep(make([3, 5, 0]).to_json(), make([3, 4, 0]).to_json(), **fields)
    assert record.file_sha256 is None
    write_snapshot(tmp_path / own, make([3, 3, 0]).to_json())  # another run created the baseline meanwhile
    refused = store.refusal(record)
    assert refused is not None and refused[0].startswith(f"{own} changed since")
    (tmp_path / own).unlink()
    assert isinstance(store.accept(record), Accepted)
    assert (tmp_path / own).read_text(encoding="utf-8") == make([3, 5, 0]).to_json()
    assert (tmp_path / FILE).read_text(encoding="utf-8") == make([3, 4, 0]).to_json()  # the fallback untouched


def test_a_trace_without_its_record_is_listed_as_broken_and_can_be_removed(tmp_path: Path) -> None:
    record = kept(tmp_path, make([3, 4, 0]), make([3, 5, 0]))
    (tmp_path / ".genguard" / "pending" / f"{record.id}.json").unlink()
    store = PendingStore(tmp_path)
    (entry,) = store.entries()
    assert isinstance(entry, Broken) and "an interrupted write" in entry.why
    store.remove(entry.id)
    assert store.entries() == []


def test_ids_tests_and_files_select_pending_traces(tmp_path: Path) -> None:
    record = kept(tmp_path, make([3, 4, 0]), make([3, 5, 0]))
    entries = PendingStore(tmp_path).entries()
    for name in (record.id, record.test, record.file, "tests/test_gen.py::test_fox"):
        assert select(entries, [name]) == ([record], [])
    assert select(entries, ["tests/test_gen.py::test_dog", record.id]) == ([record], ["tests/test_gen.py::test_dog"])


@pytest.mark.parametrize("name", ["test_fox[a]", "test_fox[b]"])
def test_a_parametrized_tests_base_name_selects_each_case(tmp_path: Path, name: str) -> None:
    files = []
    for case in ("a", "b"):
        file = f"tests/__snapshots__/test_gen/test_fox[{case}].genguard"
        write_snapshot(tmp_path / file, make([3, 4, 0]).to_json())
        PendingStore(tmp_path).keep(
            make([3, 5, 0]).to_json(),
            make([3, 4, 0]).to_json(),
            test=f"tests/test_gen.py::test_fox[{case}]",
            name=f"test_fox[{case}]",
            file=file,
            compared=file,
            verdict="stale",
            summary="stale",
        )
        files.append(file)
    entries = PendingStore(tmp_path).entries()
    chosen, unknown = select(entries, ["tests/test_gen.py::test_fox"])
    assert [e.file for e in chosen if isinstance(e, Pending)] == files and not unknown
    chosen, _ = select(entries, [f"tests/test_gen.py::{name}"])
    assert len(chosen) == 1


def test_a_token_that_is_not_utf8_on_its_own_is_kept_listed_and_summarized(tmp_path: Path) -> None:
    """A byte-level tokenizer's token can be half a character (kept as lone surrogates): the record, the run summary
    and its markdown write it (a tiny llama's retraining met one)."""
    odd = {**VOCAB, 5: "\udce2\udc82"}
    old = trace_builder.trace([trace_builder.step([(3, -0.1), (5, -3.0)], text=odd)], finish=None)
    new = trace_builder.trace([trace_builder.step([(5, -0.1), (3, -3.0)], text=odd)], finish=None)
    change = change_of(compare(old, new))
    record = kept(tmp_path, old, new, change=change.to_json())
    (entry,) = PendingStore(tmp_path).entries()
    assert entry == record and Change.from_json(entry.change or {}).first == change.first
    assert "first at prompt 0 step 0: ' brown' -> '\\xe2\\x82'" in entry.line()
    summary = RunSummary(1, (), (Row("t.py::test_x", "stale", change.line(), change.why),))
    assert extract(embed(summary), "report.html") == summary
    assert "\\xe2\\x82" in render_markdown(summary)
    render_markdown(summary).encode("utf-8")  # writable as it is
