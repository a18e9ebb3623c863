"""Every snapshot comparison emits a `snapshot` event (CONTRIBUTING.md schema), so the terminal summary counts matched,
tolerated, stale and regressed snapshots, also when pytest-xdist runs the tests in workers."""

from __future__ import annotations

import json

import pytest
from snapshot_support import XDIST, run, set_variants, setup

FOUR_TESTS = """
from conftest import make_trace

def test_matched(genguard_snapshot):
    assert make_trace("test_matched") == genguard_snapshot

def test_tolerated(genguard_snapshot):
    assert make_trace("test_tolerated") == genguard_snapshot

def test_stale(genguard_snapshot):
    assert make_trace("test_stale") == genguard_snapshot

def test_regressed(genguard_snapshot):
    assert make_trace("test_regressed") == genguard_snapshot
"""

# Collects the events as the controller sees them (after pytest-xdist carried them over from the workers).
DUMP_EVENTS = """

def pytest_runtest_logreport(report):
    for name, value in report.user_properties:
        if name == "genguard":
            with open(HERE / "events.jsonl", "a") as f:
                for event in value:
                    f.write(json.dumps({"nodeid": report.nodeid, **event}) + "\\n")
"""


@XDIST
def test_the_summary_counts_each_verdict_once(pytester: pytest.Pytester, xdist: list[str]) -> None:
    setup(pytester, FOUR_TESTS)
    created = run(pytester, "--snapshot-update")
    created.stdout.fnmatch_lines(["snapshots: 0 matched, 0 tolerated divergences, 0 stale, 0 regressed, 4 created"])
    set_variants(pytester, test_tolerated={"flip": "tie"}, test_stale={"weights": "b"}, test_regressed={"drift": 0.1})
    result = run(pytester, *xdist)
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(["snapshots: 1 matched, 1 tolerated divergence, 1 stale, 1 regressed"])


def test_events_carry_verdict_failure_summary_detail_name_and_traces_on_failure(pytester: pytest.Pytester) -> None:
    from snapshot_support import CONFTEST

    setup(pytester, FOUR_TESTS)
    pytester.makeconftest(CONFTEST + DUMP_EVENTS)
    run(pytester, "--snapshot-update")
    set_variants(pytester, test_tolerated={"flip": "tie"}, test_stale={"weights": "b"}, test_regressed={"drift": 0.1})
    run(pytester)
    lines = (pytester.path / "events.jsonl").read_text().splitlines()
    events = [json.loads(line) for line in lines]
    assert [e["verdict"] for e in events[:4]] == ["created"] * 4
    checked = {e["nodeid"].split("::")[1]: e for e in events[4:]}
    assert {name: e["verdict"] for name, e in checked.items()} == {
        "test_matched": "identical",
        "test_tolerated": "tolerated divergence",
        "test_stale": "stale",
        "test_regressed": "regression",
    }
    for name, event in checked.items():
        assert event["kind"] == "snapshot"
        assert event["name"] == name
        assert event["failure"] is (name in ("test_stale", "test_regressed"))
        assert event["detail"].splitlines()[0] == event["summary"]
        assert ("expected" in event) is event["failure"]
    regressed = checked["test_regressed"]
    assert regressed["summary"].startswith("regression: prompt 0 'hello' drifts at step 0")
    from pytest_genguard.core.trace import GenerationTrace

    expected = GenerationTrace.from_json(regressed["expected"])
    actual = GenerationTrace.from_json(regressed["actual"])
    assert actual.prompts[0].steps[0].logprob - expected.prompts[0].steps[0].logprob == pytest.approx(0.1, rel=1e-5)
