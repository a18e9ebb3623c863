"""Stale versus regressed: a snapshot of another model, tokenizer, settings or prompts is stale (never a regression),
and --genguard-update-stale re-records only the stale ones."""

from __future__ import annotations

import pytest
from snapshot_support import N2, age, file_state, run, set_variants, setup, snapshot_path

THREE_TESTS = """
from conftest import make_trace

def test_stale(genguard_snapshot):
    assert make_trace("test_stale") == genguard_snapshot

def test_regressed(genguard_snapshot):
    assert make_trace("test_regressed") == genguard_snapshot

def test_fine(genguard_snapshot):
    assert make_trace("test_fine") == genguard_snapshot
"""


@pytest.fixture
def recorded(pytester: pytest.Pytester) -> pytest.Pytester:
    setup(pytester, THREE_TESTS)
    run(pytester, "--snapshot-update").assert_outcomes(passed=3)
    for name in ("test_stale", "test_regressed", "test_fine"):
        age(snapshot_path(pytester, name))
    return pytester


@pytest.mark.parametrize(
    ("variant", "reason"),
    [
        ({"weights": "b"}, "model changed: weights aaaaaaaaaaaa -> bbbbbbbbbbbb"),
        ({"tokenizer": "u"}, "tokenizer changed: tiny tttttttttttt -> tiny uuuuuuuuuuuu"),
        ({"max_new_tokens": 4}, "decoding settings changed: max_new_tokens 3 -> 4"),
    ],
    ids=["weights", "tokenizer", "settings"],
)
def test_a_changed_model_tokenizer_or_setting_makes_the_snapshot_stale_not_regressed(
    recorded: pytest.Pytester, variant: dict[str, object], reason: str
) -> None:
    set_variants(recorded, test_stale={**variant, "flip": "genuine"})  # values regressed too: still stale
    result = run(recorded)
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            f"E  *  stale: {reason}; if intended, re-record with: pytest --genguard-update-stale "
            "test_gen.py::test_stale",
            "snapshots: 2 matched, 0 tolerated divergences, 1 stale, 0 regressed",
            "stale snapshots (the model, tokenizer or decoding settings changed since they were recorded):",
            "  test_gen.py::test_stale",
        ]
    )


def test_update_stale_rerecords_only_stale_snapshots_and_regressions_keep_failing(recorded: pytest.Pytester) -> None:
    paths = {name: snapshot_path(recorded, name) for name in ("test_stale", "test_regressed", "test_fine")}
    before = {name: file_state(path) for name, path in paths.items()}
    set_variants(recorded, test_stale={"weights": "b"}, test_regressed={"flip": "genuine"}, test_fine={"drift": 1e-6})
    result = run(recorded, "--genguard-update-stale", *N2)  # the stale one is re-recorded by an xdist worker
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "snapshots: 1 matched, 0 tolerated divergences, 0 stale, 1 regressed, 1 updated",
            "*FAILED test_gen.py::test_regressed*",
        ]
    )
    assert file_state(paths["test_stale"]) != before["test_stale"]
    assert "b" * 64 in paths["test_stale"].read_text(encoding="utf-8")
    assert file_state(paths["test_regressed"]) == before["test_regressed"]
    assert file_state(paths["test_fine"]) == before["test_fine"]

    again = run(recorded)
    again.assert_outcomes(passed=2, failed=1)
    again.stdout.fnmatch_lines(["snapshots: 2 matched, 0 tolerated divergences, 0 stale, 1 regressed"])


def test_update_stale_does_not_create_missing_snapshots(pytester: pytest.Pytester) -> None:
    setup(pytester, THREE_TESTS)
    result = run(pytester, "--genguard-update-stale")
    result.assert_outcomes(failed=3)
    assert not (pytester.path / "__snapshots__").exists()


def test_a_changed_prompt_list_is_stale(recorded: pytest.Pytester) -> None:
    recorded.makepyfile(
        test_gen="""
        import dataclasses
        from conftest import make_trace

        def test_stale(genguard_snapshot):
            trace = make_trace("test_stale")
            trace = dataclasses.replace(trace, prompts=trace.prompts * 2)
            assert trace == genguard_snapshot
        """
    )
    set_variants(recorded)
    result = run(recorded, "-k", "test_stale")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["E  *  stale: prompts changed: 1 -> 2 prompts; if intended, re-record with: *"])
