"""genguard_snapshot.verify(model, tokenizer, ...): checks the test's stored trace by teacher forcing (no
re-generation), records it when asked (--snapshot-update), and applies the snapshot rule (changed model: stale)."""

from __future__ import annotations

import pytest
from snapshot_support import PERTURBABLE_MODEL, age, file_state, perturb, run, snapshot_path

import pytest_genguard


@pytest.fixture(scope="module", autouse=True)
def _warm_imports() -> None:
    """Load every module recording and verifying touch in this process first: pytester's in-process runs drop the
    modules they import, and torch cannot be imported twice."""
    tokenizer = pytest_genguard.tiny_tokenizer()
    model = pytest_genguard.tiny_model("gpt2")
    trace = pytest_genguard.record(model, tokenizer, ["a"], max_new_tokens=2)
    assert pytest_genguard.verify(model, tokenizer, trace)


VERIFIED = (
    """
from pathlib import Path

import pytest
import torch

import importlib

import pytest_genguard

record_module = importlib.import_module("pytest_genguard.hf.record")

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def tok():
    return pytest_genguard.tiny_tokenizer()

"""
    + PERTURBABLE_MODEL
    + """

@pytest.fixture(autouse=True)
def no_regeneration(monkeypatch):
    if not (HERE / "allow_record").exists():
        def boom(*args, **kwargs):
            raise AssertionError("verify() must not re-generate")
        monkeypatch.setattr(record_module, "record", boom)


def test_verified(genguard_snapshot, model, tok):
    genguard_snapshot.verify(model, tok, ["the quick", "a"], max_new_tokens=MAX_NEW_TOKENS)


def test_bare(genguard_snapshot, model, tok):
    genguard_snapshot.verify(model, tok)
"""
)


def _module(pytester: pytest.Pytester, max_new_tokens: int = 6) -> None:
    pytester.makepyfile(test_gen=VERIFIED.replace("MAX_NEW_TOKENS", str(max_new_tokens)))


@pytest.fixture
def recorded(pytester: pytest.Pytester) -> pytest.Pytester:
    _module(pytester)
    (pytester.path / "allow_record").touch()
    result = run(pytester, "--snapshot-update", "-k", "test_verified")
    result.assert_outcomes(passed=1, deselected=1)
    result.stdout.fnmatch_lines(["snapshots: 0 matched, *1 created"])
    (pytester.path / "allow_record").unlink()
    age(snapshot_path(pytester, "test_verified"))
    return pytester


def test_a_missing_snapshot_fails_and_says_to_record_it_first(pytester: pytest.Pytester) -> None:
    _module(pytester)
    result = run(pytester)
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            "E  *AssertionError: genguard snapshot 'test_verified' does not exist (__snapshots__/test_gen/"
            "test_verified.genguard); record it with: pytest --snapshot-update test_gen.py::test_verified",
            "E  *AssertionError: genguard snapshot 'test_bare' does not exist (__snapshots__/test_gen/test_bare"
            ".genguard); verify() without prompts= cannot record it: pass prompts= and max_new_tokens= (as for "
            "record()) and run pytest --snapshot-update test_gen.py::test_bare, or record it with "
            "`assert record(...) == genguard_snapshot`",
        ]
    )


def test_a_stored_trace_is_verified_without_regenerating_and_left_unchanged(recorded: pytest.Pytester) -> None:
    path = snapshot_path(recorded, "test_verified")
    before = file_state(path)
    result = run(recorded, "-k", "test_verified")
    result.assert_outcomes(passed=1, deselected=1)
    result.stdout.fnmatch_lines(["snapshots: 1 matched, 0 tolerated divergences, 0 stale, 0 regressed"])
    assert file_state(path) == before


def test_a_changed_model_makes_the_snapshot_stale_and_update_stale_rerecords_it(recorded: pytest.Pytester) -> None:
    path = snapshot_path(recorded, "test_verified")
    before = file_state(path)
    perturb(recorded.path)
    result = run(recorded, "-k", "test_verified")
    result.assert_outcomes(failed=1, deselected=1)
    result.stdout.fnmatch_lines(
        [
            "E  *AssertionError: stale: model changed: weights * -> *; if intended, re-record with: pytest "
            "--genguard-update-stale test_gen.py::test_verified",
            "snapshots: 0 matched, 0 tolerated divergences, 1 stale, 0 regressed",
        ]
    )
    assert file_state(path) == before

    (recorded.path / "allow_record").touch()
    updated = run(recorded, "-k", "test_verified", "--genguard-update-stale")
    updated.assert_outcomes(passed=1, deselected=1)
    updated.stdout.fnmatch_lines(["snapshots: 0 matched, *1 updated"])
    assert file_state(path) != before
    (recorded.path / "allow_record").unlink()
    run(recorded, "-k", "test_verified").assert_outcomes(passed=1, deselected=1)


def test_changed_recording_arguments_make_the_snapshot_stale(recorded: pytest.Pytester) -> None:
    _module(recorded, max_new_tokens=7)
    result = run(recorded, "-k", "test_verified")
    result.assert_outcomes(failed=1, deselected=1)
    result.stdout.fnmatch_lines(["E  *AssertionError: stale: decoding settings changed: max_new_tokens 6 -> 7; *"])


def test_a_regressed_stored_trace_fails_as_a_regression(recorded: pytest.Pytester) -> None:
    path = snapshot_path(recorded, "test_verified")
    text = path.read_text(encoding="utf-8")
    # hand-edit step 0's logprob of prompt 0: the model (unchanged fingerprint) no longer gives that value
    start = text.index('"logprob": ', text.index('"steps"'))
    end = text.index(",", start)
    path.write_text(text[:start] + '"logprob": -1.5' + text[end:], encoding="utf-8")
    result = run(recorded, "-k", "test_verified")
    result.assert_outcomes(failed=1, deselected=1)
    result.stdout.fnmatch_lines(["E  *AssertionError: regression: prompt 0 'the quick' drifts at step 0 *"])


def test_a_decoding_setting_added_to_verify_after_recording_makes_the_snapshot_stale(
    recorded: pytest.Pytester,
) -> None:
    """Any decoding setting (not only the common ones) given to verify() that the snapshot was not recorded with is a
    changed test argument: stale, not a silent pass (teacher forcing of the stored trace would ignore it)."""
    source = (recorded.path / "test_gen.py").read_text()
    (recorded.path / "test_gen.py").write_text(
        source.replace("max_new_tokens=6)", "max_new_tokens=6, suppress_tokens=[5], renormalize_logits=False)")
    )
    result = run(recorded, "-k", "test_verified")
    result.assert_outcomes(failed=1, deselected=1)
    result.stdout.fnmatch_lines(
        ["E  *AssertionError: stale: decoding settings changed: suppress_tokens (unset) -> '[[]5[]]'; if intended*"]
    )
    assert "renormalize_logits (unset)" not in result.stdout.str()  # False is off, as unset is: not a setting
