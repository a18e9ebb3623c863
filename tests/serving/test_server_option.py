"""``--genguard-server URL``: a project's existing snapshot tests also judge a server, without editing them (here the
recorded real vLLM responses, replayed over loopback; tests/serving/test_vllm_server.py does it on real servers)."""

from __future__ import annotations

import copy
import dataclasses

import pytest
from replay_server import RESPONSES, Replay, Reply, recorded, serving

from pytest_genguard.core.trace import GenerationTrace

TEST_FILE = """
from pathlib import Path
from pytest_genguard.core.trace import GenerationTrace

def test_served(genguard_snapshot):
    assert GenerationTrace.from_json(Path(__file__).with_name("served.json").read_text()) == genguard_snapshot
"""


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A project with one snapshot test of the served model's first prompt, its snapshot recorded."""
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # see CONTRIBUTING.md, "Tests"
    trace = GenerationTrace.from_json((RESPONSES / "snapshot.genguard").read_text(encoding="utf-8"))
    first = dataclasses.replace(trace, prompts=trace.prompts[:1])
    pytester.makepyfile(test_served=TEST_FILE)
    (pytester.path / "served.json").write_text(first.to_json(), encoding="utf-8")
    pytester.runpytest("--snapshot-update", "-p", "no:cacheprovider").assert_outcomes(passed=1)
    return pytester


def _replay(score: dict[str, object]) -> Replay:
    r = Replay()
    for name in ("version", "models", "tokenize"):
        r.add(name)
    r.routes[("POST", "/v1/completions")] = Reply(200, score)
    return r


def test_a_server_that_holds_the_snapshot_passes(project: pytest.Pytester) -> None:
    with serving(_replay(recorded("score")["body"])) as r:
        result = project.runpytest("--genguard-server", r.url, "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert ("POST", "/v1/completions") in [(m, p) for m, p, _ in r.requests]


def test_a_server_that_regressed_fails_the_unchanged_test(project: pytest.Pytester) -> None:
    moved = copy.deepcopy(recorded("score")["body"])
    for entry in moved["choices"][0]["prompt_logprobs"][1:]:
        for value in entry.values():
            value["logprob"] -= 0.05
    with serving(_replay(moved)) as r:
        result = project.runpytest("--genguard-server", r.url, "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*on the server (--genguard-server {r.url}): regression*"])


def test_without_the_option_no_server_is_asked(project: pytest.Pytester) -> None:
    project.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_a_server_url_without_its_scheme_is_a_usage_error(project: pytest.Pytester) -> None:
    result = project.runpytest("--genguard-server", "localhost:8000")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--genguard-server localhost:8000: write the server's URL with its scheme*"])
