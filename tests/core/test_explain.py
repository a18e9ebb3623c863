"""The failure text: a one-sentence summary first, then the step window, statistics, environment and the fix."""

from __future__ import annotations

import dataclasses
import functools
import re

import pytest
import trace_builder
from hypothesis import given, settings

from pytest_genguard.core.compare import compare
from pytest_genguard.core.comparison import Comparison, render, summary_line
from pytest_genguard.core.text import display_width, quote
from pytest_genguard.core.trace import GenerationTrace, ModelFingerprint, Step, TokenizerFingerprint
from pytest_genguard.core.verdict import SNAPSHOT_UPDATE, UPDATE_STALE, Verdict
from pytest_genguard.strategies import traces

TEXT = {0: "<eos>", 1: " the", 2: " quick", 3: " brown", 4: " fox", 5: " dog", 6: " cat", 7: ".", 8: " jumps"}
MODEL = ModelFingerprint("gpt2", "c0ffee" * 10, "1a2b3c4d5e6f" + "0" * 52, 127488, "float32")
TOKENIZER = TokenizerFingerprint("tiny", 512, "abcdef012345" + "0" * 52)


step = functools.partial(trace_builder.step, text=TEXT)


SETTINGS = {"do_sample": False, "max_new_tokens": 24, "top_k": 3}
trace = functools.partial(
    trace_builder.trace, prompts=["the quick"], settings=SETTINGS, model=MODEL, tokenizer=TOKENIZER
)


PATH = [
    step([(3, -0.01), (5, -5.0), (6, -6.0)]),
    step([(4, -0.02), (5, -4.6), (6, -7.0)]),
    step([(8, -0.03), (1, -5.2), (0, -6.0)]),
    step([(1, -0.01), (5, -6.22), (0, -8.0)]),
    step([(2, -0.04), (6, -5.0), (0, -6.5)]),
    step([(7, -0.05), (1, -3.2), (0, -4.0)]),
    step([(0, -0.01), (7, -5.1), (1, -6.0)]),
]


def changed(index: int, new: Step, path: list[Step] = PATH) -> list[Step]:
    return [new if i == index else s for i, s in enumerate(path)]


def regression() -> Comparison:
    return compare(trace(PATH), trace(changed(3, step([(5, -0.02), (6, -2.0), (2, -3.0)]))))


# ---------------------------------------------------------------------------------------------------- summary line


def test_identical_summary_is_one_short_line_and_nothing_to_fix() -> None:
    cmp = compare(trace(PATH), trace(PATH))
    assert summary_line(cmp) == "identical (1 prompt, 7 steps, bitwise)"
    assert render(cmp) == summary_line(cmp)


def test_within_tolerance_summary_names_the_largest_difference_and_where() -> None:
    cmp = compare(trace(PATH), trace(changed(2, step([(8, -0.03), (1, -5.2001), (0, -6.0)]))))
    assert cmp.verdict is Verdict.WITHIN_TOLERANCE
    assert summary_line(cmp) == (
        "within tolerance (max |diff| 0.0001 at prompt 0 step 2 top_logprobs[1]; "
        "atol 1e-06, rtol 0.0001, tie_tol 0.001, lse_ulps 8)"
    )
    assert "fix:" not in render(cmp)


def test_regression_summary_is_one_sentence_with_tokens_ids_logprobs_ranks_and_margin() -> None:
    assert summary_line(regression()) == (
        "regression: prompt 0 'the quick' diverges at step 3: expected ' the' (id 1, logprob -0.01) but got "
        "' dog' (id 5, logprob -0.02); ' the' is not in the new top-3; margin was 6.21"
    )


def test_regression_summary_names_a_new_token_that_was_not_in_the_old_top_k() -> None:
    cmp = compare(trace(PATH), trace(changed(3, step([(7, -0.02), (1, -2.0), (2, -3.0)]))))
    line = summary_line(cmp)
    assert "'.' was not in the old top-3" in line
    assert "not a near tie" not in line


def test_regression_summary_gives_the_gap_when_both_tokens_are_in_both_top_k() -> None:
    cmp = compare(trace(PATH), trace(changed(3, step([(5, -0.1), (1, -2.5), (0, -8.0)]))))
    assert summary_line(cmp).endswith("; not a near tie (gap 6.2 > tie_tol 0.001); margin was 6.21")


def test_tolerated_summary_names_the_near_tie() -> None:
    near = changed(1, step([(4, -0.6931), (5, -0.6935), (6, -7.0)]))
    tie = changed(1, step([(5, -0.6932), (4, -0.6934), (6, -7.0)]))
    line = summary_line(compare(trace(near), trace(tie)))
    assert line == (
        "tolerated divergence: prompt 0 'the quick' diverges at step 1: expected ' fox' (id 4, logprob -0.6931) "
        "but got ' dog' (id 5, logprob -0.6932); near tie (gap 0.0004 <= tie_tol 0.001)"
    )


def test_stale_summary_names_the_change_and_the_update_command() -> None:
    new_model = dataclasses.replace(MODEL, weights_hash="9f8e7d6c5b4a" + "1" * 52)
    cmp = compare(trace(PATH), trace(PATH, model=new_model))
    assert summary_line(cmp) == (
        f"stale: model changed: weights 1a2b3c4d5e6f -> 9f8e7d6c5b4a; if intended, re-record with: {UPDATE_STALE}"
    )
    assert UPDATE_STALE == "pytest --genguard-update-stale"


def test_drift_summaries_quote_the_offending_value_and_its_tolerance() -> None:
    topk = compare(trace(PATH), trace(changed(1, step([(4, -0.02), (5, -4.5), (6, -7.0)]))))
    assert summary_line(topk) == (
        "regression: prompt 0 'the quick' top-k drifts at step 1 (token ' fox', id 4): "
        "top_logprobs[1] (id 5) -4.6 vs -4.5 (|diff| 0.1 > tol 0.00046)"
    )
    logprob = compare(trace(PATH), trace(changed(0, dataclasses.replace(PATH[0], logprob=-0.0101))))
    assert "drifts at step 0 (token ' brown', id 3): logprob -0.01 vs -0.0101 (|diff| 0.0001 > tol" in summary_line(
        logprob
    )


def test_length_finish_and_prompt_summaries() -> None:
    short = compare(trace(PATH), trace(PATH[:5], finish="length"))
    assert summary_line(short) == (
        "regression: prompt 0 'the quick' changes length at step 5: expected 7 tokens (finish 'eos') "
        "but got 5 (finish 'length')"
    )
    finish = compare(trace(PATH), trace(PATH, finish="stop"))
    assert "finish reason changed after step 6: expected 'eos' but got 'stop'" in summary_line(finish)
    ids = trace(PATH)
    other = dataclasses.replace(ids, prompts=(dataclasses.replace(ids.prompts[0], prompt_ids=(1, 9)),))
    assert summary_line(compare(ids, other)) == (
        "regression: prompt 0 'the quick' is tokenized differently: prompt_ids [1, 2] vs [1, 9]"
    )


def test_the_summary_is_the_first_line_of_render_and_of_str() -> None:
    cmp = regression()
    assert render(cmp).split("\n")[0] == summary_line(cmp) == str(cmp).split("\n")[0]
    assert "\n" not in summary_line(cmp)


# ---------------------------------------------------------------------------------------------------- sections


def window_steps(text: str) -> list[int]:
    """The step numbers of the window's rows (one expected line per step)."""
    return [int(m.group(1)) for m in re.finditer(r"^(?:>>)? +(\d+)  expected ", text, re.MULTILINE)]


def marked(text: str) -> list[str]:
    return [line for line in text.split("\n") if line.startswith(">>")]


def test_the_window_marks_the_divergent_step_and_shows_two_steps_either_side() -> None:
    text = render(regression())
    assert window_steps(text) == [1, 2, 3, 4, 5]
    expected_row, actual_row = marked(text)
    assert expected_row.split()[:4] == [">>", "3", "expected", "'"]
    assert "' the'" in expected_row and "' dog'" in actual_row
    assert "' dog':-6.22" in expected_row  # top-k entries name tokens seen anywhere in the traces
    assert "(the paths split at step 3: later steps are shown, not compared)" in text


def test_the_window_is_clipped_at_the_ends_and_shows_where_a_side_ended() -> None:
    text = render(compare(trace(PATH), trace(PATH[:6], finish="length")))
    expected_row, actual_row = marked(text)
    assert "'<eos>'" in expected_row
    assert "(end: length)" in actual_row
    assert window_steps(text) == [4, 5, 6]


def test_statistics_list_counts_errors_the_worst_value_and_the_tolerances() -> None:
    cmp = compare(trace(PATH), trace(changed(1, step([(4, -0.02), (5, -4.5), (6, -7.0)]))))
    text = render(cmp)
    assert "  compared 10 values, 1 beyond tolerance (10.00%)" in text
    assert "  max abs err 0.1, mean abs err 0.01, max rel err 0.0217, worst at prompt 0 step 1 top_logprobs[1]" in text
    assert "  tolerances: atol 1e-06, rtol 0.0001, tie_tol 0.001" in text


@pytest.mark.parametrize(
    ("fix", "command"),
    [(None, f"fix: if the new behaviour is intended: {SNAPSHOT_UPDATE}"), ("make rerecord", "make rerecord")],
)
def test_a_regression_ends_with_the_fix_command(fix: str | None, command: str) -> None:
    assert render(regression(), fix=fix).split("\n")[-1].endswith(command)


def test_a_stale_comparison_suggests_re_recording_only_stale_snapshots() -> None:
    cmp = compare(trace(PATH), trace(PATH, settings={"do_sample": False, "max_new_tokens": 32, "top_k": 3}))
    text = render(cmp)
    assert text.split("\n")[0].startswith("stale: decoding settings changed: max_new_tokens 24 -> 32; ")
    assert text.split("\n")[-1].endswith(UPDATE_STALE)
    assert render(cmp, fix="tox -e rerecord").split("\n")[0].endswith("re-record with: tox -e rerecord")


def test_differing_environment_fields_are_listed() -> None:
    actual = trace(PATH, environment={"device": "cuda", "torch": "2.13.0", "gpu": "H100"})
    text = render(compare(trace(PATH), actual))
    assert "environment differs (expected -> actual):\n  device: 'cpu' -> 'cuda'\n  gpu: None -> 'H100'" in text


def test_other_prompts_divergences_are_listed_after_the_first() -> None:
    two = GenerationTrace(prompts=(*trace(PATH).prompts, dataclasses.replace(trace(PATH).prompts[0], prompt="b")))
    broken = GenerationTrace(
        prompts=(
            *regression().actual.prompts,
            dataclasses.replace(trace(PATH).prompts[0], prompt="b", finish_reason="stop"),
        )
    )
    cmp = compare(two, broken)
    assert summary_line(cmp).endswith("(+1 more prompt regressed)")
    assert "other prompts:\n  regression (finish_reason): prompt 1 'b' finish reason changed" in render(cmp)


# ---------------------------------------------------------------------------------------------------- token display


@pytest.mark.parametrize(
    ("token", "shown"),
    [
        (" fox", "' fox'"),
        ("\n", "'\\n'"),
        ("\t\r", "'\\t\\r'"),
        ("it's", "'it\\'s'"),
        ("a\\b", "'a\\\\b'"),
        ("\udcc3", "'\\xc3'"),
        ("caf\udcc3\udca9", "'caf\\xc3\\xa9'"),
        ("\ud800", "'\\ud800'"),
        ("\u200b", "'\\u200b'"),
        ("\u2028", "'\\u2028'"),
        ("\x00\x85", "'\\x00\\x85'"),
        ("😀", "'😀'"),
        ("\U000e0001", "'\\U000e0001'"),
        ("", "''"),
    ],
)
def test_tokens_are_quoted_so_whitespace_and_raw_bytes_are_visible(token: str, shown: str) -> None:
    assert quote(token) == shown


def test_long_tokens_are_cut_with_an_ellipsis_after_the_quote() -> None:
    assert quote("abcdefghijklmnopqrstuvwxyz", 10) == "'abcdefg'..."
    assert display_width("😀a") == 3
    assert display_width("e\u0301") == 1


def test_surrogate_tokens_render_safely_as_utf8() -> None:
    path = changed(3, step([(5, -0.02), (6, -2.0), (2, -3.0)], text="\udcc3"))
    text = render(compare(trace(PATH), trace(path)))
    assert "'\\xc3'" in text
    text.encode("utf-8")  # no lone surrogate reaches the terminal


def test_a_dtype_switch_names_unprintable_dtypes_escaped() -> None:
    old = trace(PATH, model=None, environment={"device": "cpu", "dtype": "\udc80"})
    cmp = compare(old, trace(PATH, model=None, environment={"device": "cpu", "dtype": "float16"}))
    line = summary_line(cmp)
    assert "dtype changed \\x80 -> float16" in line  # the raw byte a surrogate stands for, as tokens show it
    render(cmp).encode("utf-8")  # no lone surrogate reaches the terminal


def test_window_lines_stay_under_120_columns() -> None:
    text = render(regression())
    assert all(display_width(line) < 120 for line in text.split("\n")[1:])


@settings(max_examples=30, deadline=None)
@given(traces(allow_nan=True, max_prompts=2), traces(allow_nan=True, max_prompts=2))
def test_any_explanation_is_printable_utf8_with_a_one_line_summary(a: GenerationTrace, b: GenerationTrace) -> None:
    for cmp in (compare(a, b), compare(a, a)):
        text = render(cmp)
        text.encode("utf-8")
        assert text.split("\n")[0] == summary_line(cmp)
        assert not any(c in summary_line(cmp) for c in "\r\n\x85\u2028\u2029")


def test_alternatives_no_step_chose_are_named_from_the_traces_token_texts() -> None:
    cmp = regression()
    assert "#6:" in "\n".join(render(cmp).splitlines())  # id 6 is never chosen: only its id is known ...
    named = dataclasses.replace(cmp.expected, token_texts={6: " sixth"})
    text = render(compare(named, cmp.actual))
    assert "' sixth':" in text and "#6:" not in text  # ... until the trace carries its text


def test_the_second_line_says_which_environment_fields_moved_before_any_number() -> None:
    old = trace(PATH, environment={"cpu_capability": "AVX2", "transformers": "4.57.6", "torch": "2.13.0"})
    new = trace(changed(3, step([(5, -0.02), (6, -2.0), (2, -3.0)])))
    new = dataclasses.replace(
        new, environment={"cpu_capability": "AVX512", "transformers": "5.23.0", "torch": "2.13.0"}
    )
    lines = render(compare(old, new)).splitlines()
    assert lines[1] == "recorded on transformers 4.57.6 / AVX2, now transformers 5.23.0 / AVX512"
    same = render(compare(old, dataclasses.replace(new, environment=old.environment))).splitlines()
    assert not same[1].startswith("recorded on")


def test_a_torch_upgrade_leads_the_environment_line_like_a_transformers_one() -> None:
    recorded = {"torch": "2.13.0+cpu", "transformers": "5.23.0", "cpu_capability": "AVX2", "num_threads": 1}
    old = trace(PATH, environment=recorded)
    new = trace(changed(3, step([(5, -0.02), (6, -2.0), (2, -3.0)])))

    def line(**moved: object) -> str:
        return render(compare(old, dataclasses.replace(new, environment={**recorded, **moved}))).splitlines()[1]

    assert line(torch="2.6.0+cu124") == "recorded on torch 2.13.0+cpu, now torch 2.6.0+cu124"
    # Named first, before the hardware and the settings that moved with it ...
    assert line(torch="2.14.1+cu130", cpu_capability="AVX512", num_threads=2) == (
        "recorded on torch 2.13.0+cpu / AVX2 / threads 1, now torch 2.14.1+cu130 / AVX512 / threads 2"
    )
    assert line(torch="2.6.0", transformers="4.57.6").startswith("recorded on torch 2.13.0+cpu / transformers 5.23.0,")
    # ... and not named when only something else moved (the same release, another kernel set).
    assert line(cpu_capability="AVX512") == "recorded on AVX2, now AVX512"


# ---------------------------------------------------------------------------------------------------- unseeded sampling


SAMPLED = {"do_sample": True, "mode": "sample", "max_new_tokens": 24, "seed": None}


def test_a_failing_snapshot_sampled_without_a_seed_says_so_first() -> None:
    # Before: "regression: prompt 0 ... diverges at step 0", as if the model were broken (issue 33).
    other = changed(0, step([(5, -0.9), (3, -1.0), (6, -2.0)]))
    cmp = compare(trace(PATH, settings=SAMPLED), trace(other, settings=SAMPLED))
    assert not cmp
    assert summary_line(cmp).startswith(
        "regression: the recorded trace was sampled without a seed (do_sample=True, seed None): no run can draw "
        "its tokens again, so it cannot be checked; record it with a seed (record(..., seed=0)) and re-record: "
    )
    assert "prompt 0 'the quick' diverges at step 0" in summary_line(cmp)
    seeded = {**SAMPLED, "seed": 7}  # negative control: a seeded sample that diverges is a plain regression
    plain = summary_line(compare(trace(PATH, settings=seeded), trace(other, settings=seeded)))
    assert plain.startswith("regression: prompt 0 'the quick' diverges at step 0")
    assert compare(trace(PATH, settings=SAMPLED), trace(PATH, settings=SAMPLED))  # and a match is just a match
