"""The terminal summary: snapshot verdicts, invariants, fragile steps and the re-record command, quiet when unused."""

from __future__ import annotations

import re

import pytest

from pytest_genguard.core.events import from_json
from pytest_genguard.plugin import summary
from pytest_genguard.plugin.tally import Tally, counts_lines

XDIST = pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])

CONFTEST = """
import pathlib

import pytest

from pytest_genguard.core.trace import GenerationTrace, ModelFingerprint, PromptTrace, Step, TokenizerFingerprint

VOCAB = {0: "<|endoftext|>", 3: " brown", 4: " fox", 5: " dog", 6: " cat"}


def build(path, weights="a" * 64, tie=None):
    # at step `tie` the runner-up is 5e-4 nats behind: under float32's tie_tol of 1e-3, a near tie
    steps = []
    for i, tid in enumerate(path):
        other = 6 if tid != 6 else 4
        second = -0.1005 if i == tie else -4.0
        steps.append(Step(tid, VOCAB[tid], -0.1, -0.1, (tid, other), (-0.1, second), -0.1))
    prompt = PromptTrace("the quick", (1, 2), tuple(steps), "eos" if path[-1] == 0 else "length")
    return GenerationTrace(
        prompts=(prompt,),
        settings={"max_new_tokens": 8, "mode": "greedy"},
        model=ModelFingerprint("gpt2", "c" * 64, weights, 1000, "float32"),
        tokenizer=TokenizerFingerprint("tiny", 512, "t" * 64),
        environment={"device": "cpu"},
    )


@pytest.fixture
def make():
    return build


@pytest.fixture
def recording():
    return (pathlib.Path(__file__).parent / "phase.txt").read_text().strip() == "record"
"""

SCENARIO = """
from pytest_genguard import assert_no_repetition


def test_identical(make, genguard_snapshot):
    assert make([3, 4, 0]) == genguard_snapshot


def test_tolerated(make, genguard_snapshot, recording):
    assert make([3, 4, 0] if recording else [3, 6, 0], tie=1) == genguard_snapshot


def test_stale(make, genguard_snapshot, recording):
    assert make([3, 4, 0], weights="a" * 64 if recording else "b" * 64) == genguard_snapshot


def test_regressed(make, genguard_snapshot, recording):
    assert make([3, 4, 0] if recording else [3, 5, 0]) == genguard_snapshot


def test_fine(make):
    assert_no_repetition(make([3, 4, 0]))


def test_loop(make, recording):
    assert_no_repetition(make([3, 4, 0] if recording else [5, 5, 5, 5, 5, 5, 0]))
"""


def section(stdout: str) -> list[str]:
    """The lines of the genguard summary section (empty when there is none)."""
    lines = stdout.splitlines()
    starts = [i for i, line in enumerate(lines) if re.fullmatch(r"=+ genguard =+", line)]
    if not starts:
        return []
    out = []
    for line in lines[starts[0] + 1 :]:
        if line.startswith(("===", "---")):  # the next section (syrupy's report, the short summary)
            break
        if line:
            out.append(line)
    return out


@pytest.fixture
def recorded(pytester: pytest.Pytester) -> pytest.Pytester:
    """A project whose snapshots were recorded (serially) in the 'record' phase, now switched to 'check'."""
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_scenario=SCENARIO)
    pytester.path.joinpath("phase.txt").write_text("record")
    result = pytester.runpytest("-p", "no:cacheprovider", "--snapshot-update")
    result.assert_outcomes(passed=6)
    assert section(result.stdout.str()) == [
        "snapshots: 0 matched, 0 tolerated divergences, 0 stale, 0 regressed, 4 created",
        "invariants: 2 checked, 0 failed",
    ]
    pytester.path.joinpath("phase.txt").write_text("check")
    return pytester


@XDIST
def test_summary_counts_each_verdict_and_names_the_command_that_re_records_stale_snapshots(
    recorded: pytest.Pytester, xdist: list[str]
) -> None:
    result = recorded.runpytest("-p", "no:cacheprovider", *xdist)
    result.assert_outcomes(passed=3, failed=3)
    lines = section(result.stdout.str())
    assert lines == [
        "snapshots: 1 matched, 1 tolerated divergence, 1 stale, 1 regressed",
        "invariants: 2 checked, 1 failed",
        "what changed: 1 of 4 prompts in 4 checks changed path, 0 drifted in value only, 1 near tie tolerated",
        "first divergences by step: 1-3: 1",
        "paths split by step: 1-3: 1",
        "stale snapshots (the model, tokenizer or decoding settings changed since they were recorded):",
        "  test_scenario.py::test_stale",
        "re-record only the stale snapshots with: pytest --genguard-update-stale test_scenario.py",
        "2 new traces kept for review in .genguard/pending (git ignores it): accept or reject each with `genguard "
        "review` (`--list`, `--accept ID`), without running the model again",
    ]
    if xdist:
        return  # the command itself is exercised once, serially
    command = lines[-2].split("with: pytest ", 1)[1].split()
    rerun = recorded.runpytest("-p", "no:cacheprovider", *command)
    rerun.assert_outcomes(passed=4, failed=2)  # the stale snapshot was re-recorded; the regression still fails
    assert (
        section(rerun.stdout.str())[0]
        == "snapshots: 1 matched, 1 tolerated divergence, 0 stale, 1 regressed, 1 updated"
    )


def test_a_plain_project_with_the_plugin_installed_prints_no_genguard_section(pytester: pytest.Pytester) -> None:
    # (tests/plugin/test_plugin_basics.py checks the same under -n 2). A fresh process, as a user's run is: in-process,
    # the outer run has already imported pytest_genguard, and pytest warns it cannot rewrite it a second time.
    pytester.makepyfile(test_plain="def test_plain(): assert 1 + 1 == 2")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert section(result.stdout.str()) == []
    assert "genguard" not in result.stdout.str().split("\ncollected ", 1)[1]


def test_fragile_steps_seen_while_recording_are_counted(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pathlib

        import torch

        from pytest_genguard.hf.record import record
        from pytest_genguard.hf.tiny import tiny_model, tiny_tokenizer


        def test_record_on_exact_ties():
            model = tiny_model("gpt2")
            with torch.no_grad():
                model.get_output_embeddings().weight.zero_()  # every logit 0: every step is an exact tie
            trace = record(model, tiny_tokenizer(), ["the quick", "a"], max_new_tokens=3, top_k=2)
            steps = [s for p in trace for s in p.steps]
            assert steps and all(s.margin == 0.0 for s in steps)
            pathlib.Path("steps.txt").write_text(str(len(steps)))
        """
    )
    # A subprocess: an in-process run would drop the extension modules (torch, numpy) it imports, and those cannot
    # be imported twice in one process.
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-v")
    result.assert_outcomes(passed=1)
    steps = int(pytester.path.joinpath("steps.txt").read_text())
    lines = section(result.stdout.str())
    assert lines[0] == "no genguard checks ran"  # record() alone checks nothing
    assert lines[1] == (
        f"fragile steps seen while recording: {steps} in 1 test (top-1/top-2 margin under the tie tolerance: a tiny "
        "numeric change can flip these tokens)"
    )
    # -v names them: the test, each prompt and step, and the margin
    where = "; ".join(
        f"prompt {i} {p!r} step {s} (margin 0)" for i, p in enumerate(["the quick", "a"]) for s in range(3)
    )
    assert lines[2:] == [
        f"  test_fragile_steps_seen_while_recording_are_counted.py::test_record_on_exact_ties: {where}"
    ]


def test_fragile_steps_follow_the_tie_tolerance_of_the_ini_and_the_marker(pytester: pytest.Pytester) -> None:
    """One near-tie rule: record() calls a step fragile exactly where the test's own comparison would call a split
    a near tie, with the ini's genguard_tie_tol and the test's marker on top of the dtype default."""
    pytester.makeini("[pytest]\ngenguard_tie_tol = 100\n")  # every margin of a tiny model is under 100
    pytester.makepyfile(
        """
        import pathlib

        import pytest

        from pytest_genguard.hf.record import record
        from pytest_genguard.hf.tiny import tiny_model, tiny_tokenizer


        def test_ini():
            trace = record(tiny_model("gpt2"), tiny_tokenizer(), ["the quick"], max_new_tokens=3, top_k=2)
            pathlib.Path("steps.txt").write_text(str(sum(len(p.steps) for p in trace)))


        @pytest.mark.genguard(tie_tol=0)
        def test_marker():
            record(tiny_model("gpt2"), tiny_tokenizer(), ["the quick"], max_new_tokens=3, top_k=2)
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-v")
    result.assert_outcomes(passed=2)
    steps = int(pytester.path.joinpath("steps.txt").read_text())
    lines = section(result.stdout.str())
    assert lines[1].startswith(f"fragile steps seen while recording: {steps} in 1 test ")
    assert "test_marker" not in "\n".join(lines)


def test_the_rerecord_command_names_each_file_with_stale_snapshots_once() -> None:
    stale = ["a/test_x.py::test_1", "a/test_x.py::test_2[p]", "b/test y.py::test_3"]
    assert summary.rerecord_command(stale) == "pytest --genguard-update-stale a/test_x.py 'b/test y.py'"
    per_env = "pytest --genguard-baselines per-env --genguard-update-stale a/test_x.py 'b/test y.py'"
    assert summary.rerecord_command(stale, per_env=True) == per_env


def test_verify_and_reference_checks_get_their_own_lines() -> None:
    tally = Tally()
    tally.add("t.py::a", [from_json({"kind": "verify", "verdict": "identical", "failure": False})])
    tally.add("t.py::b", [from_json({"kind": "reference", "verdict": "regression", "failure": True})])
    tally.add("t.py::c", [from_json({"kind": "record", "fragile_steps": 2})])
    assert counts_lines(tally) == [
        "teacher-forced verifications: 1 checked, 0 failed",
        "reference comparisons: 1 checked, 1 failed",
    ]
    assert tally.fragile_steps == 2 and sum(tally.checks.values()) == 2


@XDIST
def test_with_v_every_count_names_its_tests(recorded: pytest.Pytester, xdist: list[str]) -> None:
    result = recorded.runpytest("-p", "no:cacheprovider", "-v", *xdist)
    lines = section(result.stdout.str())
    assert lines[0] == "snapshots: 1 matched, 1 tolerated divergence, 1 stale, 1 regressed"
    assert lines[1] == "  test_scenario.py::test_identical: identical (1 prompt, 3 steps, bitwise)"
    assert lines[2].startswith("  test_scenario.py::test_tolerated: tolerated divergence: prompt 0 'the quick' ")
    assert lines[3].startswith("  test_scenario.py::test_stale: stale: model changed: weights aaaaaaaaaaaa -> ")
    assert lines[4].startswith("  test_scenario.py::test_regressed: regression: prompt 0 'the quick' diverges at ")
    assert lines[5] == "invariants: 2 checked, 1 failed"
    assert lines[6] == "  test_scenario.py::test_fine: assert_no_repetition: ok"
    assert lines[7].startswith("  test_scenario.py::test_loop: assert_no_repetition: 1 repetition in 1 of 1 prompt")


NEGATIVE_CONTROLS = """
import pytest

from pytest_genguard import assert_no_repetition
from pytest_genguard.core.events import emit


def test_the_invariant_catches_a_loop(make):
    with pytest.raises(AssertionError, match="repeats"):
        assert_no_repetition(make([5, 5, 5, 5, 5, 5, 0]))


def test_a_regressed_trace_does_not_match(make, genguard_snapshot):
    assert make([3, 4, 0]) == genguard_snapshot
    assert not (make([3, 5, 0]) == genguard_snapshot(name="again"))  # (recorded in the first run)


def test_fine(make):
    assert_no_repetition(make([3, 4, 0]))
"""


@XDIST
def test_an_all_passing_run_reports_no_failures_and_counts_expected_misses_apart(
    pytester: pytest.Pytester, xdist: list[str]
) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(
        test_controls=NEGATIVE_CONTROLS.replace("assert not (make([3, 5, 0]) ==", "assert (make([3, 4, 0]) ==")
    )
    pytester.path.joinpath("phase.txt").write_text("record")
    pytester.runpytest("-p", "no:cacheprovider", "--snapshot-update").assert_outcomes(passed=3)
    pytester.makepyfile(test_controls=NEGATIVE_CONTROLS)
    result = pytester.runpytest("-p", "no:cacheprovider", "-v", *xdist)
    result.assert_outcomes(passed=3)
    lines = section(result.stdout.str())
    assert lines[0] == (
        "snapshots: 1 matched, 0 tolerated divergences, 0 stale, 1 regressed (1 of them did not hold in tests that "
        "passed: those tests expected it)"
    )
    assert lines[2].endswith("(did not hold; the test passed)")
    invariants = lines.index(
        "invariants: 2 checked, 0 failed, 1 did not hold in tests that passed (those tests expected it)"
    )
    assert lines[invariants + 1] == "  test_controls.py::test_fine: assert_no_repetition: ok"
    assert lines[invariants + 2].startswith("  test_controls.py::test_the_invariant_catches_a_loop: assert_no_rep")
    assert lines[invariants + 2].endswith("(did not hold; the test passed)")
    assert not any(" failed, " in line and not line.startswith(("invariants", "  ")) for line in lines)


UNREADABLE = """
from conftest import build


def test_unreadable(genguard_snapshot):
    assert build([3, 4, 0]) == genguard_snapshot


def test_missing(genguard_snapshot):
    assert build([3, 4, 0]) == genguard_snapshot
"""


def test_unreadable_and_missing_snapshots_are_counted(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_files=UNREADABLE)
    folder = pytester.path / "__snapshots__" / "test_files"
    folder.mkdir(parents=True)
    (folder / "test_unreadable.genguard").write_text('{"schema": 1, "prompts": [')  # truncated
    result = pytester.runpytest("-p", "no:cacheprovider", "-v")
    result.assert_outcomes(failed=2)
    lines = section(result.stdout.str())
    assert lines[0] == "snapshots: 0 matched, 0 tolerated divergences, 0 stale, 0 regressed, 1 unreadable, 1 missing"
    assert lines[1].startswith("  test_files.py::test_unreadable: __snapshots__/test_files/test_unreadable.genguard")
    assert lines[2].startswith("  test_files.py::test_missing: genguard snapshot 'test_missing' does not exist")


def test_a_failed_check_counts_as_failed_only_in_a_failed_test() -> None:
    tally = Tally()
    miss = {"kind": "verify", "verdict": "regression", "failure": True, "summary": "regression: ..."}
    tally.add("t.py::negative_control", [from_json(miss)], "passed")
    tally.add("t.py::broken", [from_json(miss)], "failed")
    tally.add("t.py::xfail", [from_json(miss)], "skipped")
    tally.add("t.py::fine", [from_json({"kind": "verify", "verdict": "identical", "failure": False})], "passed")
    assert counts_lines(tally) == [
        "teacher-forced verifications: 4 checked, 1 failed, 2 did not hold in tests that passed (those tests "
        "expected it)"
    ]
    assert [nodeid for nodeid, _ in tally.failures] == ["t.py::broken"]  # what the HTML report draws
