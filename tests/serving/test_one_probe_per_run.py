"""One probe of the server per run, shared by every step that needs it: `check-server` (each snapshot's judgement and
``--load``'s batch variance) and ``pytest --genguard-server`` (every assertion of the session) ask the server what it
is (``GET /props``, ``GET /version``, ``GET /v1/models``, the ``/tokenize`` probe) once (the recorded real vLLM
responses, replayed over loopback and counted)."""

from __future__ import annotations

import dataclasses
import io
from collections import Counter
from typing import Any

import pytest
from replay_server import RESPONSES, serving
from served_replay import F32, served

from pytest_genguard.core.trace import GenerationTrace
from pytest_genguard.serving.check import CheckOptions, check_traces
from pytest_genguard.serving.http import Endpoint

PROBES = [("GET", "/props"), ("GET", "/version"), ("GET", "/v1/models")]


def _first_prompt() -> GenerationTrace:
    trace = GenerationTrace.from_json((RESPONSES / "snapshot.genguard").read_text(encoding="utf-8"))
    return dataclasses.replace(trace, prompts=trace.prompts[:1])


def _probes(requests: list[tuple[str, str, Any]]) -> dict[tuple[str, str], int]:
    """How often each probe request was made (the tokenize probe: a POST of the text "a")."""
    counts = Counter((method, path) for method, path, _ in requests)
    asked = {probe: counts[probe] for probe in PROBES}
    asked[("POST", "/tokenize a")] = sum(
        1 for m, p, body in requests if (m, p) == ("POST", "/tokenize") and (body or {}).get("prompt") == "a"
    )
    return asked


def test_check_server_probes_the_server_once_for_every_snapshot_and_the_load_run() -> None:
    snapshots = [(f"s{i}.genguard", _first_prompt()) for i in range(3)]
    out = io.StringIO()
    with serving(served(F32)) as r:
        code = check_traces(Endpoint(r.url), snapshots, out=out, options=CheckOptions(concurrency=2, load=True))
    assert code == 0, out.getvalue()
    assert out.getvalue().count("load s") == 3  # every snapshot was judged, then run under load
    assert _probes(r.requests) == dict.fromkeys([*PROBES, ("POST", "/tokenize a")], 1), _probes(r.requests)


TWO_TESTS = """
from pathlib import Path
from pytest_genguard.core.trace import GenerationTrace

def _served():
    return GenerationTrace.from_json(Path(__file__).with_name("served.json").read_text())

def test_one(genguard_snapshot):
    assert _served() == genguard_snapshot

def test_two(genguard_snapshot):
    assert _served() == genguard_snapshot
"""


def test_the_server_option_probes_the_server_once_per_session(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # see CONTRIBUTING.md, "Tests"
    pytester.makepyfile(test_served=TWO_TESTS)
    (pytester.path / "served.json").write_text(_first_prompt().to_json(), encoding="utf-8")
    pytester.runpytest("--snapshot-update", "-p", "no:cacheprovider").assert_outcomes(passed=2)
    with serving(served(F32)) as r:
        result = pytester.runpytest("--genguard-server", r.url, "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    completions = sum(1 for m, p, _ in r.requests if (m, p) == ("POST", "/v1/completions"))
    assert completions == 2  # both assertions judged the server
    assert _probes(r.requests) == dict.fromkeys([*PROBES, ("POST", "/tokenize a")], 1), _probes(r.requests)
