"""--genguard-record-reference / --genguard-reference: traces recorded in one environment, checked in another.

The snapshot fixture hands every compared trace to `reference.on_trace`. A reference recorded here and compared here
is the same environment, so the comparison is bitwise; to stand in for "another environment" the tests edit the
reference file the way another machine would have written it (a different environment field, drifted values, a
flipped near tie, a different token) and check how each prompt is classified, reported and failed.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from pytest_genguard.core.trace import GenerationTrace, Step
from pytest_genguard.hf.record import record
from pytest_genguard.hf.tiny import tiny_model, tiny_tokenizer
from pytest_genguard.plugin.reference import ENVIRONMENT_FILE, reference_path

RUN = ("-p", "no:cacheprovider")

TEST_FILE = """
import pytest
from pytest_genguard.hf.record import record
from pytest_genguard.hf.tiny import tiny_model, tiny_tokenizer

MODEL = tiny_model("gpt2")
PROMPTS = ["the quick", "once upon a", "the train", "she reads"]

@pytest.mark.genguard(tie_tol=1.0)
def test_gen(genguard_snapshot):
    trace = record(MODEL, tiny_tokenizer(), PROMPTS, max_new_tokens=4, top_k=5)
    assert trace == genguard_snapshot

def test_other(genguard_snapshot):
    assert record(MODEL, tiny_tokenizer(), "we cook", max_new_tokens=3, top_k=3) == genguard_snapshot
"""


@pytest.fixture(scope="module", autouse=True)
def _warm_imports() -> None:
    """Import what the inner runs use before pytester snapshots sys.modules: torch and transformers' lazily loaded
    modules cannot be imported a second time in one process once pytester has dropped them."""
    record(tiny_model("gpt2"), tiny_tokenizer(), "the quick", max_new_tokens=1, top_k=1)


def _record(pytester: pytest.Pytester, *extra: str) -> Path:
    pytester.makepyfile(test_gen=TEST_FILE)
    refs = pytester.path / "refs"
    result = pytester.runpytest(*RUN, "--snapshot-update", "--genguard-record-reference", str(refs), *extra)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "*genguard: recording reference traces to*refs",
            "*genguard-reference*",
            f"recorded 2 reference traces to {refs}",
        ]
    )
    assert "reference comparisons" not in result.stdout.str()  # recording checks nothing
    return refs


def test_recorded_references_compare_bitwise_and_identical_in_the_same_environment(pytester: pytest.Pytester) -> None:
    refs = _record(pytester)
    ref_file = reference_path(refs, "test_gen.py::test_gen", 0)
    assert ref_file == refs / "test_gen.py" / "test_gen.0.json"
    trace = GenerationTrace.from_json(ref_file.read_text(encoding="utf-8"))
    assert [p.prompt for p in trace] == ["the quick", "once upon a", "the train", "she reads"]
    env = json.loads((refs / ENVIRONMENT_FILE).read_text(encoding="utf-8"))
    assert env["environment_class"] == "cpu-float32" and env["environment"]["device_type"] == "cpu"
    assert sorted(p.name for p in refs.rglob("*")) == [
        "environment.json",
        "test_gen.0.json",
        "test_gen.py",
        "test_other.0.json",
    ]  # nothing half-written left behind
    result = pytester.runpytest(*RUN, "--genguard-reference", str(refs))
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            f"*genguard: comparing with reference traces in {refs} (recorded on cpu-float32*",
            "*genguard-reference*",
            "reference traces: 2 compared, 0 failed",
            "prompts: 5 identical",
        ]
    )
    assert "  test_gen.py::test_gen [test_gen.0.json] prompt 0 'the quick': identical" in result.outlines
    assert "  test_gen.py::test_other [test_other.0.json] prompt 0 'we cook': identical" in result.outlines
    result.stdout.fnmatch_lines(["reference comparisons: 2 checked, 0 failed"])


def test_under_xdist_workers_record_and_compare_and_the_controller_reports(pytester: pytest.Pytester) -> None:
    refs = _record(pytester)
    again = pytester.path / "again"
    args = ("--genguard-reference", str(refs), "--genguard-record-reference", str(again), "-n", "2")
    result = pytester.runpytest(*RUN, *args)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        ["*genguard-reference*", f"recorded 2 reference traces to {again}", "prompts: 5 identical"]
    )
    assert "  test_gen.py::test_other [test_other.0.json] prompt 0 'we cook': identical" in result.outlines
    for name in ("test_gen.0.json", "test_other.0.json"):  # same environment, deterministic: the same bytes
        assert (again / "test_gen.py" / name).read_bytes() == (refs / "test_gen.py" / name).read_bytes()
    assert json.loads((again / ENVIRONMENT_FILE).read_text(encoding="utf-8"))["environment_class"] == "cpu-float32"
    assert not [p for p in again.rglob("*.tmp")]


def _near_tie(actual: Step) -> Step:
    """The step another machine would have recorded if the top-2 tokens had traded places by a hair."""
    t1, t2 = actual.top_ids[0], actual.top_ids[1]
    lp = actual.top_logprobs[1]
    ids = (t2, t1, *actual.top_ids[2:])
    return dataclasses.replace(
        actual, token_id=t2, logprob=lp, top_ids=ids, top_logprobs=(lp, lp - 1e-4, *actual.top_logprobs[2:])
    )


def _edit(ref_file: Path) -> GenerationTrace:
    """Prompt 0 untouched, 1 drifted by 1e-6, 2 a flipped near tie at step 1, 3 a different token at step 2."""
    ref = GenerationTrace.from_json(ref_file.read_text(encoding="utf-8"))
    p = list(ref.prompts)
    assert all(len(x.steps) >= 3 for x in p), "precondition: every prompt generated 3+ tokens"
    assert p[2].steps[1].margin < 1.0, "precondition: the marker's tie_tol=1.0 covers step 1's margin"
    drift = dataclasses.replace(p[1].steps[0], logprob=p[1].steps[0].logprob * (1 + 1e-6))
    p[1] = dataclasses.replace(p[1], steps=(drift, *p[1].steps[1:]))
    p[2] = dataclasses.replace(p[2], steps=(p[2].steps[0], _near_tie(p[2].steps[1]), *p[2].steps[2:]))
    s2 = p[3].steps[2]
    outsider = next(i for i in range(4, 700) if i not in s2.top_ids)
    p[3] = dataclasses.replace(
        p[3], steps=(*p[3].steps[:2], dataclasses.replace(s2, token_id=outsider), *p[3].steps[3:])
    )
    env = {**ref.environment, "num_threads": int(ref.environment["num_threads"] or 1) + 7}
    edited = dataclasses.replace(ref, prompts=tuple(p), environment=env)
    ref_file.write_text(edited.to_json(), encoding="utf-8")
    return edited


def test_each_prompt_is_classified_reported_and_a_regression_fails_the_test(pytester: pytest.Pytester) -> None:
    refs = _record(pytester)
    ref_file = reference_path(refs, "test_gen.py::test_gen", 0)
    _edit(ref_file)
    result = pytester.runpytest(*RUN, "--genguard-reference", str(refs), "-rf")
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*genguard-reference*",
            "reference traces: 2 compared, 1 failed",
            "prompts: 2 identical, 1 regression, 1 tolerated near-tie divergence, 1 within tolerance",
            "  test_gen.py::test_gen ?test_gen.0.json?: reference regression (cpu-float32 -> cpu-float32, "
            "tolerant rule*",
            "environment differences from the reference: num_threads *",
        ]
    )
    head = "  test_gen.py::test_gen [test_gen.0.json] prompt"
    lines = [line for line in result.outlines if line.startswith(head)]
    gap = lines[2].split("gap ")[1]
    assert lines[:3] == [
        f"{head} 0 'the quick': identical",
        f"{head} 1 'once upon a': within tolerance",
        f"{head} 2 'the train': tolerated near-tie divergence at step 1 (margin 0.0001, gap {gap}",
    ]
    assert float(gap.rstrip(")")) <= 1.0
    assert lines[3].startswith(f"{head} 3 'she reads': regression at step 2 (expected id ")
    assert lines[3].endswith("not in the new top-5)")
    assert (
        "reference regression (cpu-float32 -> cpu-float32, tolerant rule "
        "(atol 1e-06, rtol 0.0001, tie_tol 1, lse_ulps 8))" in out
    )
    assert "num_threads:" in out  # explain.render lists the differing environment field in the failure
    assert "FAILED test_gen.py::test_gen" in out
    reports = [r for r in result.reprec.getreports("pytest_runtest_logreport") if r.when == "call"]
    events = {
        r.nodeid: [e for n, v in r.user_properties if n == "genguard" for e in v if e["kind"] == "reference"]
        for r in reports
    }
    (gen_event,) = events["test_gen.py::test_gen"]
    assert gen_event["verdict"] == "regression" and gen_event["failure"] is True
    assert gen_event["reference"] == str(ref_file)
    assert [p["outcome"] for p in gen_event["prompts"]] == [
        "identical",
        "within tolerance",
        "tolerated near-tie divergence",
        "regression",
    ]
    assert (
        GenerationTrace.from_json(gen_event["expected"]).environment["num_threads"]
        != GenerationTrace.from_json(gen_event["actual"]).environment["num_threads"]
    )
    (other_event,) = events["test_gen.py::test_other"]
    assert other_event["verdict"] == "identical" and other_event["bitwise"] is True


def test_within_one_environment_even_a_tiny_drift_is_a_regression(pytester: pytest.Pytester) -> None:
    refs = _record(pytester)
    ref_file = reference_path(refs, "test_gen.py::test_gen", 0)
    ref = GenerationTrace.from_json(ref_file.read_text(encoding="utf-8"))
    p0 = ref.prompts[0]
    drift = dataclasses.replace(p0.steps[0], logprob=p0.steps[0].logprob * (1 + 1e-6))
    edited = dataclasses.replace(ref, prompts=(dataclasses.replace(p0, steps=(drift, *p0.steps[1:])), *ref.prompts[1:]))
    ref_file.write_text(edited.to_json(), encoding="utf-8")
    result = pytester.runpytest(*RUN, "--genguard-reference", str(refs))
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*reference regression (cpu-float32 -> cpu-float32, bitwise (same environment))*",
            "*prompt 0 'the quick': regression at step 0 (logprob*",
        ]
    )


def test_a_missing_reference_file_fails_the_test_naming_the_file_and_how_to_record_it(
    pytester: pytest.Pytester,
) -> None:
    refs = _record(pytester)
    reference_path(refs, "test_gen.py::test_other", 0).unlink()
    result = pytester.runpytest(*RUN, "--genguard-reference", str(refs))
    result.assert_outcomes(passed=1, failed=1)
    missing = refs / "test_gen.py" / "test_other.0.json"
    assert f"  test_gen.py::test_other [test_other.0.json]: missing reference trace {missing}" in result.outlines
    result.stdout.fnmatch_lines(
        [
            f"*no reference trace for test_gen.py::test_other (snapshot 0): {missing} does not exist. Record it in the "
            f"reference environment with: pytest test_gen.py --genguard-record-reference {refs}*",
        ]
    )


def test_the_snapshot_failure_is_shown_rather_than_hidden_by_the_reference_check(pytester: pytest.Pytester) -> None:
    refs = _record(pytester)
    pytester.makepyfile(test_gen=TEST_FILE.replace('"the quick", ', ""))  # the snapshot is now stale
    result = pytester.runpytest(*RUN, "--genguard-reference", str(refs))
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*stale: prompts changed*"])


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (
            lambda root: None,
            "--genguard-reference {refs}: no such directory; record reference traces with: "
            "pytest --genguard-record-reference {refs}",
        ),
        (
            lambda root: (root / "refs").mkdir(),
            "--genguard-reference {refs}: {refs}/environment.json is missing, so this is not a reference directory",
        ),
        (
            lambda root: ((root / "refs").mkdir(), (root / "refs" / "environment.json").write_text("{")),
            "--genguard-reference: cannot read {refs}/environment.json",
        ),
    ],
    ids=["no-directory", "no-environment-file", "corrupt-environment-file"],
)
def test_a_bad_reference_directory_is_a_usage_error(pytester: pytest.Pytester, setup: Any, message: str) -> None:
    setup(pytester.path)
    refs = pytester.path / "refs"
    pytester.makepyfile("def test_never(): raise AssertionError('must not run')")
    result = pytester.runpytest(*RUN, "--genguard-reference", str(refs))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message.format(refs=refs) in result.stderr.str()


def test_recording_into_the_directory_being_compared_against_is_a_usage_error(pytester: pytest.Pytester) -> None:
    refs = _record(pytester)
    result = pytester.runpytest(*RUN, "--genguard-reference", str(refs), "--genguard-record-reference", str(refs))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "both name" in result.stderr.str() and "use two directories" in result.stderr.str()


def test_reference_file_names_are_readable_and_unique_per_test_and_index(tmp_path: Path) -> None:
    assert reference_path(tmp_path, "tests/test_a.py::test_x", 0) == tmp_path / "tests__test_a.py" / "test_x.0.json"
    assert reference_path(tmp_path, "t.py::test_x[a-1]", 2).name == "test_x[a-1].2.json"
    cls = reference_path(tmp_path, "t.py::TestA::test_x", 0).name
    odd_a = reference_path(tmp_path, "t.py::test_x[a/b]", 0).name
    odd_b = reference_path(tmp_path, "t.py::test_x[a_b]", 0).name
    assert cls.startswith("TestA__test_x-") and cls.endswith(".0.json")
    assert odd_a != odd_b and odd_a.startswith("test_x[a_b]-")


@pytest.mark.parametrize("flag", ["--genguard-reference", "--genguard-record-reference"])
def test_a_reference_folder_outside_the_project_keeps_the_test_paths(pytester: pytest.Pytester, flag: str) -> None:
    """pytest fixes its rootdir before plugins declare their options, so the value of ``--genguard-reference DIR``
    (space-separated, DIR existing) counts as a test path and, without an ini file, moves the rootdir to a common
    ancestor of the project and DIR: every reference read "missing" (issue 33). Reference files stay keyed by the
    test file's path from the rootdir pytest finds without genguard's folders."""
    outside = pytester.path.parent / f"refs-outside-{pytester.path.name}"
    outside.mkdir()  # it exists before the run: that is what moves the rootdir
    pytester.makepyfile(test_gen=TEST_FILE)
    if flag == "--genguard-record-reference":
        recorded = pytester.runpytest(*RUN, "--snapshot-update", flag, str(outside))
        recorded.assert_outcomes(passed=2)
        assert (outside / "test_gen.py" / "test_gen.0.json").is_file()
        return
    pytester.runpytest(*RUN, "--snapshot-update", f"--genguard-record-reference={outside}").assert_outcomes(passed=2)
    assert (outside / "test_gen.py" / "test_gen.0.json").is_file()
    result = pytester.runpytest(*RUN, flag, str(outside))
    result.assert_outcomes(passed=2)
    assert "missing" not in result.stdout.str()
    result.stdout.fnmatch_lines(["*test_gen.py::test_gen*identical*"])
