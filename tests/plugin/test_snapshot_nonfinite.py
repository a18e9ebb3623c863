"""NaN or inf in a trace is a numerical fault, not a behaviour to freeze: recording it into a snapshot fails naming the
prompt and the step, and a trace with NaN never passes as "identical" to a stored one (NaN equals NaN in the rule),
unless the test opts in with ``@pytest.mark.genguard(allow_nonfinite=True)``."""

from __future__ import annotations

import math

import pytest
from snapshot_support import XDIST, file_state, run, set_variants, setup, snapshot_path

from pytest_genguard.core.review import nonfinite_message, nonfinite_values
from pytest_genguard.core.trace import GenerationTrace, PromptTrace, Step

TESTS = """
import pytest
from conftest import make_trace

@pytest.mark.genguard(allow_nonfinite={allow})
def test_greedy(genguard_snapshot):
    assert make_trace("test_greedy") == genguard_snapshot
"""

NAN_AT = "prompt 0 'hello' step 1: logprob nan, score nan, top_logprobs[0] nan, top_logprobs[1] nan"


@XDIST
def test_recording_nan_fails_naming_prompt_and_step_and_writes_nothing(
    pytester: pytest.Pytester, xdist: list[str]
) -> None:
    setup(pytester, TESTS.format(allow=False), test_greedy={"nonfinite": "nan"})
    result = run(pytester, "--snapshot-update", *xdist)
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert (
        "genguard snapshot 'test_greedy' (__snapshots__/test_gen/test_greedy.genguard): the trace holds 4 "
        f"non-finite values (NaN or inf), first at {NAN_AT}; it was neither recorded nor compared"
    ) in out
    assert "fix the model, or, if they are expected, mark the test @pytest.mark.genguard(allow_nonfinite=True)" in out
    result.stdout.fnmatch_lines(["snapshots: 0 matched, * 1 with non-finite values"])
    assert not snapshot_path(pytester, "test_greedy").exists()
    assert "snapshot generated" not in result.stdout.str()


def test_an_infinite_score_is_refused_too(pytester: pytest.Pytester) -> None:
    setup(pytester, TESTS.format(allow=False), test_greedy={"nonfinite": "-inf"})
    result = run(pytester, "--snapshot-update")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["E  *the trace holds 1 non-finite value (NaN or inf), first at prompt 0 'hello' step 2: score -inf;*"]
    )


def test_nan_never_passes_as_identical_against_a_stored_nan_without_the_opt_in(pytester: pytest.Pytester) -> None:
    setup(pytester, TESTS.format(allow=True), test_greedy={"nonfinite": "nan"})
    run(pytester, "--snapshot-update").assert_outcomes(passed=1)  # the opt-in records it...
    path = snapshot_path(pytester, "test_greedy")
    assert '"nan"' in path.read_text() or "NaN" in path.read_text()
    before = file_state(path)
    passed = run(pytester)
    passed.assert_outcomes(passed=1)  # ...and, opted in, NaN equals NaN
    passed.stdout.fnmatch_lines(["snapshots: 1 matched, *"])

    pytester.makepyfile(test_gen=TESTS.format(allow=False))
    for args in ((), ("--snapshot-update",), ("--genguard-update-stale",)):
        result = run(pytester, *args)
        result.assert_outcomes(failed=1)
        assert f"the trace holds 4 non-finite values (NaN or inf), first at {NAN_AT};" in result.stdout.str()
        assert file_state(path) == before  # nothing recorded over it either


def test_a_finite_trace_against_a_stored_nan_is_a_regression(pytester: pytest.Pytester) -> None:
    setup(pytester, TESTS.format(allow=True), test_greedy={"nonfinite": "nan"})
    run(pytester, "--snapshot-update").assert_outcomes(passed=1)
    set_variants(pytester)
    pytester.makepyfile(test_gen=TESTS.format(allow=False))
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["E  *regression: prompt 0 'hello' drifts at step 1*"])
    # Named as what it is (issue 33: it read "|diff| inf > tol 0", as if the model had drifted infinitely).
    result.stdout.fnmatch_lines(["E  *logprob nan vs * (the expected value is not a finite number)*"])
    assert "inf > tol" not in result.stdout.str()


def test_nonfinite_values_names_each_step_and_counts_every_value() -> None:
    nan, inf = math.nan, math.inf
    steps = (
        Step(1, "a", -0.1, -0.1, (1, 2), (-0.1, -2.0)),
        Step(2, "b", nan, -0.2, (2, 1), (-0.2, -inf), best_score=inf),
    )
    trace = GenerationTrace(prompts=(PromptTrace("the quick", (5,), steps, "length"),))
    count, where = nonfinite_values(trace)
    assert count == 3
    assert where == ["prompt 0 'the quick' step 1: logprob nan, best_score inf, top_logprobs[1] -inf"]
    assert nonfinite_values(GenerationTrace(prompts=(PromptTrace("x", (5,), steps[:1], "length"),))) == (0, [])
    lines = nonfinite_message("test_x", "snap.genguard", count, where * 12)
    assert lines[0].startswith("genguard snapshot 'test_x' (snap.genguard): the trace holds 3 non-finite values")
    assert lines[-1] == "  ... and 2 more steps"


VERIFY = """
import pytest
import torch

from pytest_genguard.hf.tiny import tiny_model, tiny_tokenizer


def nan_model():
    model = tiny_model("gpt2")
    with torch.no_grad():
        model.get_output_embeddings().weight.fill_(float("nan"))  # every logit NaN
    return model


@pytest.mark.genguard(allow_nonfinite=True)
def test_opted_in(genguard_snapshot):
    genguard_snapshot.verify(nan_model(), tiny_tokenizer(), ["the quick"], max_new_tokens=3)


@pytest.mark.genguard(allow_nonfinite={allow})
def test_verify(genguard_snapshot):
    genguard_snapshot.verify(nan_model(), tiny_tokenizer(), ["the quick"], max_new_tokens=3)
"""


def test_verify_does_not_pass_a_model_that_outputs_nan_against_a_stored_nan(pytester: pytest.Pytester) -> None:
    # Both snapshots recorded with the opt-in; then test_verify drops it, test_opted_in keeps it.
    pytester.makepyfile(test_gen=VERIFY.format(allow=True))
    # A subprocess each: an in-process run drops the torch modules it imported, which cannot be imported twice.
    pytester.runpytest_subprocess("-p", "no:cacheprovider", "--snapshot-update").assert_outcomes(passed=2)
    pytester.makepyfile(test_gen=VERIFY.format(allow=False))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)  # opted in: identical; without the opt-in: refused
    result.stdout.fnmatch_lines(
        ["E  *genguard snapshot 'test_verify' (*test_verify.genguard): the model's output holds * non-finite values*"]
    )
    assert "genguard snapshot 'test_opted_in'" not in result.stdout.str()
