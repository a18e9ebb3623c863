"""``--genguard-server URL`` judges the server as the test judges in process: under the test's
``@pytest.mark.genguard(fidelity=...)`` budget, and under its ini and marker tolerances (recorded real vLLM responses,
float32 and bfloat16, replayed over loopback)."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest
from replay_server import RESPONSES, Replay, recorded, serving
from served_replay import served, widened

from pytest_genguard.core.trace import GenerationTrace

TEST_FILE = """
from pathlib import Path
import pytest
from pytest_genguard.core.trace import GenerationTrace

{marker}
def test_served(genguard_snapshot):
    assert GenerationTrace.from_json(Path(__file__).with_name("served.json").read_text()) == genguard_snapshot
"""

# A budget at the served tiny model's own scale: its real bf16 server is above the bf16 preset's kld_mean (1e-4) on
# the lower bound alone (2.6e-4; tests/core/test_check_server_budget.py).
SERVED_BF16 = '{"kld_mean": 1e-3, "kld_p99": 3e-3, "kld_max": 4e-3}'


def project(pytester: pytest.Pytester, marker: str = "", ini: str = "") -> pytest.Pytester:
    """A project with one snapshot test of the served model's first prompt, its snapshot recorded."""
    trace = GenerationTrace.from_json((RESPONSES / "snapshot.genguard").read_text(encoding="utf-8"))
    first = dataclasses.replace(trace, prompts=trace.prompts[:1])
    pytester.makepyfile(test_served=TEST_FILE.format(marker=marker))
    if ini:
        pytester.makeini(f"[pytest]\n{ini}\n")
    (pytester.path / "served.json").write_text(first.to_json(), encoding="utf-8")
    pytester.runpytest("--snapshot-update", "-p", "no:cacheprovider").assert_outcomes(passed=1)
    return pytester


def run(pytester: pytest.Pytester, score: Any, *, cap: int = 5) -> pytest.RunResult:
    """The project's tests against a replayed server scoring with `score`, its logprobs capped at `cap` (a budget asks
    for the cap; the recorded responses hold the snapshot's top-5)."""
    return run_on(pytester, served(score, cap=cap))


def run_on(pytester: pytest.Pytester, replayed: Replay) -> pytest.RunResult:
    with serving(replayed) as r:
        return pytester.runpytest("--genguard-server", r.url, "-p", "no:cacheprovider", "-vv")


@pytest.fixture(autouse=True)
def _no_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # see CONTRIBUTING.md, "Tests"


BF16 = recorded("score_bfloat16")["body"]
F32 = recorded("score")["body"]


def test_a_bfloat16_server_fails_the_float_rule_and_the_message_names_the_fidelity_marker(
    pytester: pytest.Pytester,
) -> None:
    result = run(project(pytester), BF16)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*judged by a fidelity budget: mark the test @pytest.mark.genguard(fidelity='bf16')*"])


def test_the_tests_fidelity_marker_judges_the_bfloat16_server_and_a_bound_alone_fails_it_unproven(
    pytester: pytest.Pytester,
) -> None:
    # fixed limits, the snapshot's top-5 bounds: within on lower bounds only proves nothing, and never passes
    result = run(project(pytester, f"@pytest.mark.genguard(fidelity={SERVED_BF16})"), BF16)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*on the server (--genguard-server *): unproven: within on lower bounds only, which proves nothing",
            "*to prove it: calibrate the snapshot with pytest_genguard.calibrate(model, tokenizer, trace)*",
        ]
    )


def test_the_fidelity_marker_asks_the_server_for_its_cap_of_logprobs_once_per_run(pytester: pytest.Pytester) -> None:
    # as check-server --budget does (tests/core/test_check_server_budget.py): the cap probe, then every score at it
    replayed = served(widened(BF16, 20), cap=20)
    result = run_on(project(pytester, f"@pytest.mark.genguard(fidelity={SERVED_BF16})"), replayed)
    result.assert_outcomes(failed=1)  # still unproven: the snapshot is not calibrated, its limits are fixed
    asked = [body["prompt_logprobs"] for _, route, body in replayed.requests if route == "/v1/completions"]
    assert asked[0] > 20 and set(asked[1:]) == {20}, asked


def test_a_fidelity_marker_the_server_breaks_fails_the_test(pytester: pytest.Pytester) -> None:
    # the negative control: the same server under a mean limit below its measured lower bound
    result = run(project(pytester, '@pytest.mark.genguard(fidelity={"kld_mean": 2e-4})'), BF16)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*on the server (--genguard-server *): regression*", "*kld_mean = 0.0002588 > limit*"])


def _moved(delta: float) -> object:
    moved = copy.deepcopy(F32)
    for entry in moved["choices"][0]["prompt_logprobs"][1:]:
        for value in entry.values():
            value["logprob"] -= delta
    return moved


def test_the_ini_tolerance_applies_to_the_servers_comparison(pytester: pytest.Pytester) -> None:
    # 0.05 fails the float32 default (test_server_option.py); an ini atol of 0.1 allows it, as in process
    run(project(pytester), _moved(0.05)).assert_outcomes(failed=1)
    run(project(pytester, ini="genguard_atol = 0.1"), _moved(0.05)).assert_outcomes(passed=1)


def test_the_markers_tolerance_wins_over_the_ini_for_the_server_too(pytester: pytest.Pytester) -> None:
    marked = project(pytester, "@pytest.mark.genguard(atol=1e-6)", ini="genguard_atol = 0.1")
    run(marked, _moved(0.05)).assert_outcomes(failed=1)
