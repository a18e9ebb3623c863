"""What a model change did (`core.change`): per comparison, which prompts changed path, drifted or split at a near
tie, and across a run where the first divergences fall and the KLD where one was computed; and the markdown a pull
request shows (`core.markdown`), carried through the HTML report."""

from __future__ import annotations

import dataclasses

import pytest
import trace_builder

from pytest_genguard.core.change import Change, Kld, SuiteChange, change_of, kld_of, step_bucket
from pytest_genguard.core.compare import compare
from pytest_genguard.core.fidelity import trace_fidelity
from pytest_genguard.core.markdown import GROUP_OVER, Row, RunSummary, embed, extract, render_markdown
from pytest_genguard.core.trace import GenerationTrace

VOCAB = {0: "<|endoftext|>", 3: " brown", 4: " fox", 5: " dog", 6: " cat"}


def make(*paths: list[int], tie_at: int | None = None, drift: float = 0.0) -> GenerationTrace:
    """One prompt per path; at `tie_at` the runner-up is 5e-4 behind (a near tie under float32's 1e-3)."""
    built = []
    for path in paths:
        steps = []
        for i, t in enumerate(path):
            other = 6 if t != 6 else 5
            steps.append(trace_builder.step([(t, -0.1 + drift), (other, -0.1005 if i == tie_at else -4.0)], text=VOCAB))
        built.append(steps)
    return trace_builder.trace(*built, finish=None)


def test_a_comparison_says_which_prompts_changed_path_drifted_or_tied() -> None:
    step = trace_builder.step
    same = [step([(3, -0.1), (6, -4.0)], text=VOCAB), step([(4, -0.1), (6, -0.1005)], text=VOCAB)]
    tied = [same[0], step([(6, -0.1), (4, -0.1005)], text=VOCAB)]  # the runner-up taken: a near tie
    drifted = [step([(3, -0.6), (6, -4.0)], text=VOCAB), same[1]]
    old = trace_builder.trace(same, same, same, same, finish="length")
    new = trace_builder.trace(same, tied, drifted, drifted, finish="length")
    change = change_of(compare(old, new))
    assert change.prompts == 4
    assert change.counts() == (0, 2, 1)  # prompt 1 split at a near tie; 2 and 3 drifted in value
    assert change.first is not None and change.first.prompt == 2  # the first that is not a near tie
    assert change.line().startswith("2 drifted in value; 1 near tie; first at prompt 2 step 0 (logprob)")


def test_a_path_change_is_named_with_both_tokens() -> None:
    change = change_of(compare(make([3, 4, 0]), make([3, 5, 0])))
    assert change.counts() == (1, 0, 0)
    assert change.line() == "1 of 1 prompt changed path; first at prompt 0 step 1: ' fox' -> ' dog'"
    assert Change.from_json(change.to_json()) == change


def test_a_stale_comparison_gives_its_reasons_as_why() -> None:
    new = make([3, 5, 0])
    new = dataclasses.replace(new, model=dataclasses.replace(new.model, weights_hash="b" * 64))
    change = change_of(compare(make([3, 4, 0]), new))
    assert change.why == "model changed: weights aaaaaaaaaaaa -> bbbbbbbbbbbb"


@pytest.mark.parametrize(
    ("step", "bucket"), [(0, "0"), (1, "1-3"), (3, "1-3"), (4, "4-15"), (63, "16-63"), (999, "256+")]
)
def test_first_divergences_fall_in_step_ranges(step: int, bucket: str) -> None:
    assert step_bucket(step) == bucket


def test_the_suite_counts_prompts_steps_and_the_kld_of_the_checks_that_computed_one() -> None:
    suite = SuiteChange()
    assert suite.lines() == []  # nothing changed: nothing said
    suite.add("t.py::test_a", change_of(compare(make([3, 4, 0], [3, 4, 0]), make([5, 4, 0], [3, 4, 6]))))
    suite.add("t.py::test_b", change_of(compare(make([3, 4, 0]), make([3, 4, 0]))))
    steps, _, _ = trace_fidelity(make([3, 4, 0]), make([3, 4, 0], drift=0.3))
    suite.add("t.py::test_c", Change(1, (), "", kld_of(steps)))
    lines = suite.lines()
    assert lines[0] == (
        "what changed: 2 of 4 prompts in 3 checks changed path, 0 drifted in value only, 0 near ties tolerated"
    )
    assert lines[1] == "first divergences by step: 0: 1, 1-3: 1"
    assert lines[2] == "paths split by step: 0: 1, 1-3: 1"
    assert lines[3].startswith("KLD of the new model on the recorded paths (1 check: verify() or a fidelity budget): ")
    assert lines[3].endswith("in t.py::test_c (lower bounds)")


def test_the_markdown_table_names_each_failed_test_with_its_divergence_and_why() -> None:
    rows = (
        Row("tests/test_gen.py::test_a", "stale", "prompt 0 step 1: ' fox' -> ' dog'", "model changed", "1a2b3c4d"),
        Row("tests/test_gen.py::test_b[x|y]", "regression", "prompt 2 step 0 (logprob)", "drifts <b>a lot</b>"),
    )
    text = render_markdown(RunSummary(3, ("snapshots: 1 matched",), rows, ("what changed: 2 of 3 prompts",)))
    lines = text.splitlines()
    assert lines[0] == "## genguard: 2 of 3 checks failed"
    assert "| `tests/test_gen.py::test_a` | stale | prompt 0 step 1: ' fox' -> ' dog' | model changed |" in lines
    # a pipe or HTML in a cell cannot break the table or the page
    assert (
        "| tests/test_gen.py::test_b[x\\|y] | regression | prompt 2 step 0 (logprob) | drifts &lt;b>a lot&lt;/b> |"
        in lines
    )
    assert "- what changed: 2 of 3 prompts" in lines
    assert any(line.startswith("1 new trace kept for review") for line in lines)


def test_many_failures_are_grouped_by_verdict_and_stale_reasons_named_once() -> None:
    rows = tuple(Row(f"t.py::test_{i}", "stale", "", "", reason="model changed: weights a -> b") for i in range(12))
    rows += (Row("t.py::test_r", "regression", "prompt 0 step 3", "diverges"),)
    text = render_markdown(RunSummary(20, (), rows))
    assert len(rows) > GROUP_OVER
    assert "<summary><b>stale</b>: 12 checks</summary>" in text
    assert "- model changed: weights a -> b: 12 snapshots" in text
    assert "<summary><b>regression</b>: 1 check</summary>" in text
    few = render_markdown(RunSummary(20, (), rows[-3:]))
    assert "<details>" not in few  # control: a short list is one table


def test_the_summary_travels_in_the_html_report_and_reads_back() -> None:
    summary = RunSummary(2, ("a",), (Row("t.py::test_x", "regression", "", "a </script><script>alert(1)"),), ("c",))
    page = f"<html><body>{embed(summary)}</body></html>"
    assert page.count("</script>") == 1  # the text cannot end the element early
    assert extract(page, "r.html") == summary
    with pytest.raises(ValueError, match=r"r\.html: carries no run summary"):
        extract("<html></html>", "r.html")


def test_kld_keeps_each_step_only_when_asked() -> None:
    steps, _, _ = trace_fidelity(make([3, 4, 0]), make([3, 4, 0], drift=0.3))
    assert kld_of(steps).per_step == ()
    kept = kld_of(steps, limits={"kld_max": 0.1, "top1_agreement": 0.9}, per_step=True)
    assert [s for _, s, _ in kept.per_step] == [0, 1, 2]
    assert kept.limits == {"kld_max": 0.1}  # only KLD limits are drawn
    assert isinstance(Change.from_json(Change(1, (), "", kept).to_json()).kld, Kld)


def test_a_value_drift_before_the_split_still_counts_as_a_path_change() -> None:
    """The rule stops at a prompt's first divergence (here a logprob at step 0); the path is read from the tokens."""
    old = make([3, 4, 0])
    drifted = make([3, 4, 0], drift=0.5)
    split = trace_builder.trace([*drifted.prompts[0].steps[:2], make([3, 4, 6]).prompts[0].steps[2]], finish=None)
    same_path = change_of(compare(old, drifted))
    assert same_path.counts() == (0, 1, 0)  # control: the same tokens all along is a value drift
    change = change_of(compare(old, split))
    assert change.counts() == (1, 0, 0)
    assert change.line() == (
        "1 of 1 prompt changed path; first at prompt 0 step 0 (logprob), path splits at step 2: '<|endoftext|>' -> "
        "' cat'"
    )
    assert Change.from_json(change.to_json()) == change


def test_what_accepting_changes_names_a_split_after_a_drift() -> None:
    from pytest_genguard.core.documents import Outcome
    from pytest_genguard.core.review import accepted_changes

    old = make([3, 4, 0])
    split = trace_builder.trace(
        [*make([3, 4, 0], drift=0.5).prompts[0].steps[:2], make([3, 4, 6]).prompts[0].steps[2]], finish=None
    )
    cmp = compare(old, split)
    line = accepted_changes(Outcome(cmp.verdict, "", cmp))[0]
    assert line.startswith("prompt 0 'prompt 0' drifts at step 0") and line.endswith(
        "; its path splits at step 2: '<|endoftext|>' -> ' cat'"
    )
    same = compare(old, make([3, 4, 0], drift=0.5))
    assert "splits" not in accepted_changes(Outcome(same.verdict, "", same))[0]  # control: the same tokens
