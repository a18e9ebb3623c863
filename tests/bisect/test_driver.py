"""bisect() around the search: the default good release from the snapshot, the probes' verdicts, the hint on a
failure, the requirements a probe environment pins, the CLI's exit codes. No release is installed here."""

import json
from pathlib import Path

import pytest

import pytest_genguard
from pytest_genguard import cli
from pytest_genguard.bisection.driver import BisectError, bisect, recorded_version, snapshot_files
from pytest_genguard.bisection.environments import PackageSources
from pytest_genguard.bisection.probing import verdict_of
from pytest_genguard.bisection.releases import ReleaseError, between
from pytest_genguard.bisection.report import progress_line
from pytest_genguard.bisection.search import Outcome, ProbeResult
from pytest_genguard.core.bisect_hint import bisect_hint
from pytest_genguard.core.compare import compare
from pytest_genguard.core.trace import GenerationTrace

ROOT = Path(__file__).resolve().parents[2]
CASE = "tests/bisect_cases/case_repetition_penalty.py::test_repetition_penalty_ignores_left_padding"


def test_the_snapshot_of_a_node_id_is_found_and_names_the_good_release():
    files = snapshot_files(CASE, ROOT)
    assert [f.name for f in files] == ["test_repetition_penalty_ignores_left_padding.genguard"]
    assert recorded_version(files, "transformers") == "5.21.1"
    assert recorded_version(files, "torch") == "2.13.0+cpu"


def test_a_bad_node_id_is_refused_with_what_to_pass():
    with pytest.raises(BisectError, match="not a test node id"):
        snapshot_files("tests/test_x.py", ROOT)
    with pytest.raises(BisectError, match="no test module"):
        snapshot_files("tests/nowhere.py::test_y", ROOT)


def test_bisect_starts_from_the_snapshots_release_and_ends_at_the_bad_one():
    verdicts = {"5.21.1": "passed", "5.22.0": "passed", "5.22.1": "regression", "5.23.0": "regression"}

    def probe(version):
        return ProbeResult(version, verdicts[version], verdicts[version], 0.0)

    result = pytest_genguard.bisect(
        CASE, bad="5.23.0", rootdir=ROOT, versions=["5.21.1", "5.22.0", "5.22.1", "5.23.0"], probe=probe
    )
    assert result.good == "5.21.1"
    assert result.outcome is Outcome.FOUND
    assert result.first_bad == "5.22.1"


def test_bisect_with_good_equal_to_bad_probes_once_and_says_so():
    seen = []

    def probe(version):
        seen.append(version)
        return ProbeResult(version, "passed", "passed", 0.0)

    result = bisect(CASE, good="5.23.0", bad="5.23.0", rootdir=ROOT, probe=probe)
    assert result.outcome is Outcome.NO_CHANGE and result.first_bad is None
    assert seen == ["5.23.0"]


def test_releases_between_are_ascending_and_keep_a_local_build_as_given():
    listed = ["5.23.0", "5.22.2", "5.22.1", "5.22.0", "5.21.1", "5.21.0", "not-a-version"]
    assert between(listed, "5.21.1", "5.23.0") == ["5.21.1", "5.22.0", "5.22.1", "5.22.2", "5.23.0"]
    assert between(["2.14.1", "2.14.0", "2.13.0"], "2.13.0+cpu", "2.14.1") == ["2.13.0+cpu", "2.14.0", "2.14.1"]
    local_builds = ["2.14.1", "2.14.0+cpu", "2.14.0", "2.13.0+cpu", "2.13.0"]  # pip lists find-links' builds too
    assert between(local_builds, "2.13.0+cpu", "2.14.1") == ["2.13.0+cpu", "2.14.0", "2.14.1"]
    with pytest.raises(ReleaseError, match="swap them"):
        between(listed, "5.23.0", "5.21.1")
    with pytest.raises(ReleaseError, match="--good: 'five' is not a version"):
        between(listed, "five", "5.23.0")


def probe_document(events, outcome="failed", when="call", message="AssertionError"):
    test = {"nodeid": CASE, "when": when, "outcome": outcome, "message": message, "events": events}
    return {"exitstatus": 1, "versions": {"torch": "2.13.0+cpu", "transformers": "5.23.0"}, "tests": [test]}


def test_a_probe_verdict_is_the_first_failing_genguard_check():
    detail = "regression: prompt 0 diverges at step 4\nrecorded on transformers 5.21.1, now transformers 5.23.0\n..."
    events = [
        {"kind": "snapshot", "verdict": "identical", "failure": False, "summary": "identical"},
        {"kind": "snapshot", "verdict": "regression", "failure": True, "detail": detail},
    ]
    verdict, line, environment = verdict_of(probe_document(events), CASE)
    assert verdict == "regression"
    assert line == "regression: prompt 0 diverges at step 4"
    assert environment == "recorded on transformers 5.21.1, now transformers 5.23.0"


def test_a_probe_that_passed_or_broke_outside_a_check_says_so():
    ok = [{"kind": "snapshot", "verdict": "within tolerance", "failure": False}]
    assert verdict_of(probe_document(ok, outcome="passed"), CASE)[:2] == ("passed", "passed (within tolerance)")
    broken = verdict_of(probe_document([], when="setup", message="ImportError: no module x"), CASE)
    assert broken[:2] == ("error", "error: ImportError: no module x")
    assert broken[2] == "torch 2.13.0+cpu / transformers 5.23.0"
    nothing = verdict_of({"exitstatus": 4, "tests": []}, CASE)
    assert nothing[0] == "error" and "ran no test" in nothing[1]


def test_pips_find_links_and_indexes_reach_uv(monkeypatch):
    sources = PackageSources(find_links=("/opt/wheels",), extra_index_urls=("file:///opt/pypi/simple",))
    args = sources.uv_args()
    assert args[:2] == ["--find-links", "/opt/wheels"]
    assert args[-2:] == ["--index-strategy", "unsafe-best-match"]  # pip's rule across indexes
    assert "--no-index" not in args
    assert PackageSources(find_links=("/opt/wheels",), no_index=True).uv_args() == [
        "--no-index",
        "--find-links",
        "/opt/wheels",
    ]
    monkeypatch.setenv("PIP_FIND_LINKS", "/tmp/local-wheels")
    assert "/tmp/local-wheels" in PackageSources.from_pip(("/extra",)).find_links
    assert PackageSources.from_pip(("/extra",)).find_links[0] == "/extra"


def traces(old: str, new: str, torch: str | None = None):
    snapshot = ROOT / "tests/bisect_cases/__snapshots__/case_repetition_penalty"
    text = (snapshot / "test_repetition_penalty_ignores_left_padding.genguard").read_text()
    expected = GenerationTrace.from_json(text)
    data = json.loads(text)
    data["environment"]["transformers"] = new
    if torch is not None:
        data["environment"]["torch"] = torch
    data["prompts"][0]["steps"][4]["id"] = 760  # another token at step 4: a regression
    data["prompts"][0]["steps"][4]["token"] = " friday"
    actual = GenerationTrace.from_json(json.dumps(data))
    return expected, actual


def test_a_regression_under_a_new_transformers_release_offers_the_bisect_command():
    expected, actual = traces("5.21.1", "5.23.0")
    cmp = compare(expected, actual)
    hint = bisect_hint(cmp, (CASE,))
    assert hint == f"which transformers release changed it (5.21.1 -> 5.23.0): genguard bisect {CASE}"
    assert bisect_hint(cmp, ()) is None  # no node id (genguard diff): nothing to bisect
    same = compare(*traces("5.21.1", "5.21.1"))
    assert bisect_hint(same, (CASE,)) is None  # the same release: bisect has nothing to search


def test_a_regression_under_new_transformers_and_torch_releases_offers_both_commands():
    cmp = compare(*traces("5.21.1", "5.23.0", torch="2.14.1"))
    assert bisect_hint(cmp, (CASE,)) == (
        "which release changed it (transformers 5.21.1 -> 5.23.0, torch 2.13.0+cpu -> 2.14.1): "
        f"genguard bisect {CASE}, or genguard bisect {CASE} --package torch"
    )
    torch_only = compare(*traces("5.21.1", "5.21.1", torch="2.14.1"))
    assert bisect_hint(torch_only, (CASE,)) == (
        f"which torch release changed it (2.13.0+cpu -> 2.14.1): genguard bisect {CASE} --package torch"
    )


def test_the_cli_refuses_a_node_without_snapshot_with_exit_code_2(capsys, tmp_path, monkeypatch):
    (tmp_path / "test_x.py").write_text("def test_y():\n    pass\n")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["bisect", "test_x.py::test_y"]) == cli.EXIT_USAGE
    assert "no genguard snapshot found" in capsys.readouterr().err


def test_the_progress_line_names_the_release_its_time_where_it_ran_and_its_verdict():
    probe = ProbeResult("5.22.1", "passed", "passed (identical)", 12.3, setup="new env 0.8 s")
    line = progress_line("transformers", probe)
    assert line == "  transformers 5.22.1       12.3 s  new env 0.8 s   passed (identical)"
    broken = ProbeResult("2.9.0", "", "", 3.0, skipped="torch 2.9.0 does not install (2 s): no wheel")
    line = progress_line("torch", broken)
    assert line == "  torch 2.9.0         3.0 s  skipped: torch 2.9.0 does not install (2 s): no wheel"
