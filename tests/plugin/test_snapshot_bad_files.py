"""A snapshot file that cannot be read fails that one test with a message naming the file and the fix: never an
INTERNALERROR of the run, never a silent rewrite."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from snapshot_support import age, file_state, run, setup, snapshot_path

CORRUPT = Path(__file__).resolve().parents[2] / "fixtures" / "corrupt"

TWO_TESTS = """
from conftest import make_trace

def test_greedy(genguard_snapshot):
    assert make_trace("test_greedy") == genguard_snapshot

def test_other(genguard_snapshot):
    assert make_trace("test_other") == genguard_snapshot
"""


def _hand_edited(original: bytes) -> bytes:
    return original.replace(b'"logprob": -0.5,', b'"logprob": "about -0.5",', 1)


def _settings_deleted(original: bytes) -> bytes:
    """The "settings" block removed: before, it read as settings that changed (stale), which
    --genguard-update-stale would overwrite (issue 33)."""
    edited = re.sub(rb'\n  "settings": \{.*?\n  \},', b"", original, count=1, flags=re.DOTALL)
    assert edited != original and b'"settings"' not in edited
    return edited


BAD_FILES = {
    "settings-deleted": _settings_deleted,
    "truncated": lambda original: (CORRUPT / "truncated.json").read_bytes(),
    "not-json": lambda original: (CORRUPT / "not_json.json").read_bytes(),
    "schema-2": lambda original: (CORRUPT / "schema2.json").read_bytes(),
    "wrong-types": lambda original: (CORRUPT / "wrong_types.json").read_bytes(),
    "hand-edited": _hand_edited,
    "cut-in-half": lambda original: original[: len(original) // 2],
    "not-utf8": lambda original: original.replace(b" cat", b" c\xff\xfet"),
    "empty": lambda original: b"",
}
MESSAGES = {
    "settings-deleted": "document: missing key 'settings'*",
    "truncated": "not valid JSON*",
    "not-json": 'not a genguard trace or recorder history (it has no "schema" key)*',
    "schema-2": "trace schema 2 is not supported by this pytest-genguard*",
    "wrong-types": "*expected *",
    "hand-edited": "prompts[[]0[]].steps[[]0[]].logprob: expected a number, found 'about -0.5'*",
    "cut-in-half": "not valid JSON*",
    "not-utf8": "not UTF-8 text (invalid byte at offset *",
    "empty": "not valid JSON*",
}


@pytest.fixture
def recorded(pytester: pytest.Pytester) -> pytest.Pytester:
    setup(pytester, TWO_TESTS)
    run(pytester, "--snapshot-update").assert_outcomes(passed=2)
    age(snapshot_path(pytester, "test_greedy"))
    return pytester


@pytest.mark.parametrize("kind", sorted(BAD_FILES))
def test_a_bad_snapshot_fails_only_its_test_naming_the_file_and_is_left_unchanged(
    recorded: pytest.Pytester, kind: str
) -> None:
    path = snapshot_path(recorded, "test_greedy")
    path.write_bytes(BAD_FILES[kind](path.read_bytes()))
    age(path)
    before = file_state(path)
    result = run(recorded)
    result.assert_outcomes(passed=1, failed=1)
    assert "INTERNALERROR" not in result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            f"E  *  __snapshots__/test_gen/test_greedy.genguard: {MESSAGES[kind]}",
            "E  *  This test fails until the file is fixed (it was left unchanged); to re-record only this snapshot: "
            "pytest --snapshot-update test_gen.py::test_greedy",
        ]
    )
    assert file_state(path) == before


@pytest.mark.parametrize("kind", ["truncated", "settings-deleted"])
def test_update_stale_leaves_a_bad_snapshot_unchanged_and_failing(recorded: pytest.Pytester, kind: str) -> None:
    path = snapshot_path(recorded, "test_greedy")
    path.write_bytes(BAD_FILES[kind](path.read_bytes()))
    age(path)
    before = file_state(path)
    result = run(recorded, "--genguard-update-stale")
    result.assert_outcomes(passed=1, failed=1)
    assert "INTERNALERROR" not in result.stdout.str()
    assert file_state(path) == before


def test_snapshot_update_replaces_a_bad_snapshot_because_the_user_asked_for_it(recorded: pytest.Pytester) -> None:
    path = snapshot_path(recorded, "test_greedy")
    path.write_bytes(b"{")
    result = run(recorded, "--snapshot-update")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*1 snapshot updated*"])
    from pytest_genguard.core.trace import GenerationTrace

    assert GenerationTrace.from_json(path.read_text(encoding="utf-8")).prompts[0].token_ids == (10, 20, 30)
