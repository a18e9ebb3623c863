"""The probe plugin of `genguard bisect` (``-p pytest_genguard.plugin.probe``): what a probe run reports, read back
by the driver as the release's verdict."""

import json
from pathlib import Path

import pytest

from pytest_genguard.bisection.probing import PROBE_ENV_VAR, verdict_of
from pytest_genguard.plugin.probe import ENV_VAR

SNAPSHOT = (
    Path(__file__).resolve().parents[1]
    / "bisect_cases/__snapshots__/case_repetition_penalty/test_repetition_penalty_ignores_left_padding.genguard"
)

TESTS = f"""
from pathlib import Path
from pytest_genguard import GenerationTrace

TEXT = Path({str(SNAPSHOT)!r}).read_text()

def test_snapshot_missing(genguard_snapshot):
    assert GenerationTrace.from_json(TEXT) == genguard_snapshot

def test_plain_failure():
    assert 1 == 2, "not a genguard check"

def test_passes():
    pass
"""


def test_the_driver_and_the_probe_agree_on_the_variable():
    assert PROBE_ENV_VAR == ENV_VAR


def test_a_probe_run_reports_each_tests_verdict_and_the_versions(pytester: pytest.Pytester, monkeypatch):
    pytester.makepyfile(test_probe=TESTS)
    out = pytester.path / "probe.json"
    monkeypatch.setenv(ENV_VAR, str(out))
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)
    result = pytester.runpytest_subprocess("-p", "pytest_genguard.plugin.probe", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=2)
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # the probe's early exit keeps pytest's exit status
    document = json.loads(out.read_text())
    assert document["versions"]["transformers"] and document["versions"]["torch"]
    assert verdict_of(document, "test_probe.py::test_snapshot_missing")[0] == "missing"
    assert verdict_of(document, "test_probe.py::test_plain_failure")[:2] == (
        "failed",
        "failed: AssertionError: not a genguard check",
    )
    assert verdict_of(document, "test_probe.py::test_passes")[:2] == ("passed", "passed (no genguard check)")
    assert not (pytester.path / "__snapshots__").exists()  # a probe never writes a snapshot


def test_without_the_variable_the_probe_writes_nothing(pytester: pytest.Pytester, monkeypatch):
    pytester.makepyfile(test_probe="def test_passes():\n    pass\n")
    monkeypatch.delenv(ENV_VAR, raising=False)
    result = pytester.runpytest_subprocess("-p", "pytest_genguard.plugin.probe", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert list(pytester.path.glob("*.json")) == []


HINT_TEST = f"""
import json
from pathlib import Path
from pytest_genguard import GenerationTrace

def test_regressed(genguard_snapshot):
    data = json.loads(Path({str(SNAPSHOT)!r}).read_text())
    data["environment"]["transformers"] = "5.23.0"
    data["prompts"][0]["steps"][4]["id"] = 760  # another token at step 4: a regression
    data["prompts"][0]["steps"][4]["token"] = " friday"
    assert GenerationTrace.from_json(json.dumps(data)) == genguard_snapshot
"""


def test_a_regression_under_another_transformers_ends_with_the_bisect_command(pytester: pytest.Pytester):
    pytester.makepyfile(test_hint=HINT_TEST)
    folder = pytester.path / "__snapshots__" / "test_hint"
    folder.mkdir(parents=True)
    (folder / "test_regressed.genguard").write_text(SNAPSHOT.read_text())  # recorded on transformers 5.21.1
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-vv")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "E *regression: prompt 0 'the quick brown fox' diverges at step 4*",
            "E *recorded on transformers 5.21.1, now transformers 5.23.0",
            "E *which transformers release changed it (5.21.1 -> 5.23.0): genguard bisect test_hint.py::test_regressed",
        ]
    )
