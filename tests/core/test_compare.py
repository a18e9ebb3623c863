"""The comparison rule: verdicts, divergence kinds, stale detection, tolerances, and its algebraic properties."""

from __future__ import annotations

import dataclasses
import functools
import math
import subprocess
import sys
from pathlib import Path

import pytest
import trace_builder
from hypothesis import given, settings, strategies as st

from pytest_genguard.core.compare import Fingerprints, compare
from pytest_genguard.core.comparison import Comparison
from pytest_genguard.core.jsontext import float32
from pytest_genguard.core.tolerances import BFLOAT16, EXACT, FLOAT16, FLOAT32, LSE_ULPS, Tolerances, tolerances_for
from pytest_genguard.core.trace import GenerationTrace, ModelFingerprint, Step, TokenizerFingerprint
from pytest_genguard.core.verdict import Verdict
from pytest_genguard.strategies import environments, token_texts, traces

PROPERTY = settings(max_examples=40, deadline=None)

TEXT = {0: "<eos>", 1: " the", 2: " quick", 3: " brown", 4: " fox", 5: " dog", 6: " cat", 7: "."}
MODEL = ModelFingerprint("gpt2", "1a2b3c4d5e6f" + "0" * 52, "1a2b3c4d5e6f" + "1" * 52, 127488, "float32")
TOKENIZER = TokenizerFingerprint("tiny", 512, "abcdef012345" + "2" * 52)
SETTINGS = {"do_sample": False, "max_new_tokens": 24, "top_k": 3}


step = functools.partial(trace_builder.step, text=TEXT)
"""A step whose raw top-k is `top` (best first); the chosen token defaults to the top-1."""


trace = functools.partial(trace_builder.trace, settings=SETTINGS, model=MODEL, tokenizer=TOKENIZER)


BASE = [
    step([(3, -0.01), (5, -5.0), (6, -6.0)]),
    step([(4, -0.02), (5, -4.6), (6, -7.0)]),
    step([(7, -0.05), (1, -3.2), (0, -4.0)]),
    step([(0, -0.01), (7, -5.1), (1, -6.0)]),
]


def with_step(index: int, new: Step, path: list[Step] = BASE) -> list[Step]:
    return [new if i == index else s for i, s in enumerate(path)]


# ---------------------------------------------------------------------------------------------------- verdicts


def test_a_trace_compared_with_itself_is_identical() -> None:
    cmp = compare(trace(BASE), trace(BASE))
    assert cmp.verdict is Verdict.IDENTICAL
    assert cmp and cmp.ok
    assert cmp.divergences == () and cmp.first is None
    assert cmp.stats.compared == 4 * (2 + 3)
    assert cmp.stats.exceeded == 0 and cmp.stats.max_abs == 0.0 and cmp.stats.worst is None
    assert cmp.prompt_verdicts == (Verdict.IDENTICAL,)


def test_drift_below_tolerance_is_within_tolerance_with_statistics() -> None:
    drifted = with_step(1, step([(4, -0.02), (5, -4.6001), (6, -7.0)]))
    cmp = compare(trace(BASE), trace(drifted))
    assert cmp.verdict is Verdict.WITHIN_TOLERANCE and cmp
    assert cmp.stats.exceeded == 0
    assert cmp.stats.max_abs == pytest.approx(1e-4, rel=1e-2)
    assert cmp.stats.worst == "prompt 0 step 1 top_logprobs[1]"
    assert cmp.stats.max_rel == pytest.approx(1e-4 / 4.6001, rel=1e-2)


def test_drift_above_tolerance_in_the_top_k_is_a_topk_regression() -> None:
    drifted = with_step(1, step([(4, -0.02), (5, -4.5), (6, -7.0)]))
    cmp = compare(trace(BASE), trace(drifted))
    assert cmp.verdict is Verdict.REGRESSION and not cmp
    div = cmp.first
    assert div is not None
    assert (div.kind, div.step, div.prompt_index) == ("topk", 1, 0)
    assert div.detail.startswith("top_logprobs[1] (id 5) -4.6 vs -4.5 (|diff| 0.1 > tol 0.00046)")
    assert cmp.stats.exceeded == 1


def test_drift_of_the_chosen_logprob_or_score_is_a_logprob_regression() -> None:
    moved = dataclasses.replace(BASE[2], logprob=-0.06)
    cmp = compare(trace(BASE), trace(with_step(2, moved)))
    assert cmp.first is not None and (cmp.first.kind, cmp.first.step) == ("logprob", 2)
    assert cmp.first.detail.startswith("logprob -0.05 vs -0.06")
    rescored = dataclasses.replace(BASE[2], score=-1.0)
    cmp = compare(trace(BASE), trace(with_step(2, rescored)))
    assert cmp.first is not None and cmp.first.kind == "logprob" and cmp.first.detail.startswith("score")


def test_nothing_after_the_first_divergence_is_compared() -> None:
    drifted = with_step(1, step([(4, -0.02), (5, -4.5), (6, -7.0)]))
    drifted = with_step(3, step([(0, -1.0), (7, -1.1), (1, -6.0)]), drifted)
    cmp = compare(trace(BASE), trace(drifted))
    assert len(cmp.divergences) == 1 and cmp.first is not None and cmp.first.step == 1
    assert cmp.stats.compared == 2 * 5  # steps 0 and 1 only


def test_a_near_tie_divergence_is_tolerated() -> None:
    expected = with_step(1, step([(4, -0.6931), (5, -0.6935), (6, -7.0)]))
    actual = with_step(1, step([(5, -0.6932), (4, -0.6934), (6, -7.0)]))
    actual[2:] = [step([(1, -0.3), (2, -1.0), (3, -2.0)])]  # the paths part: later steps are not compared
    cmp = compare(trace(expected), trace(actual))
    assert cmp.verdict is Verdict.TOLERATED and cmp
    div = cmp.first
    assert div is not None and div.tolerated and div.kind == "token"
    assert (div.expected_token_id, div.actual_token_id) == (4, 5)
    assert (div.expected_rank_in_actual, div.actual_rank_in_expected) == (1, 1)
    assert div.gap == pytest.approx(0.0004, abs=1e-6)
    assert div.expected_margin == pytest.approx(0.0004, abs=1e-6)


def test_a_genuine_divergence_is_a_regression_with_ranks_and_gap() -> None:
    actual = with_step(1, step([(5, -0.1), (4, -2.5), (6, -7.0)]))
    cmp = compare(trace(BASE), trace(actual))
    assert cmp.verdict is Verdict.REGRESSION
    div = cmp.first
    assert div is not None and not div.tolerated and div.verdict is Verdict.REGRESSION
    assert (div.kind, div.step) == ("token", 1)
    assert (div.expected_token, div.actual_token) == (" fox", " dog")
    assert (div.expected_logprob, div.actual_logprob) == (-0.02, -0.1)
    assert (div.expected_rank_in_actual, div.actual_rank_in_expected) == (1, 1)
    assert div.gap == pytest.approx(4.58)
    assert div.expected_margin == pytest.approx(4.58) and div.actual_margin == pytest.approx(2.4)


def test_a_token_missing_from_the_other_sides_top_k_is_never_a_near_tie() -> None:
    # expected ' fox' (4) is not in the new top-k; the new ' cat' (6) was rank 2 in the old one
    actual = with_step(1, step([(6, -0.6931), (5, -0.6932), (1, -7.0)]))
    cmp = compare(trace(BASE), trace(actual), tie_tol=100.0)
    div = cmp.first
    assert cmp.verdict is Verdict.REGRESSION and div is not None
    assert div.expected_rank_in_actual is None and div.actual_rank_in_expected == 2 and div.gap is None
    assert "expected id 4 not in the new top-3" in div.detail
    # and the other way round: the new ' the' (1) was not in the old top-k
    actual = with_step(1, step([(1, -0.01), (4, -0.02), (6, -7.0)]))
    div = compare(trace(BASE), trace(actual), tie_tol=100.0).first
    assert div is not None and div.actual_rank_in_expected is None and div.expected_rank_in_actual == 1
    assert "actual id 1 not in the old top-3" in div.detail


def test_different_lengths_are_a_length_regression_at_the_first_missing_step() -> None:
    cmp = compare(trace(BASE), trace(BASE[:3], finish="length"))
    div = cmp.first
    assert cmp.verdict is Verdict.REGRESSION and div is not None
    assert (div.kind, div.step, div.expected_token_id, div.actual_token_id) == ("length", 3, 0, None)
    assert div.detail == "4 vs 3 tokens (finish 'eos' vs finish 'length')"


def test_a_different_finish_reason_with_the_same_tokens_is_a_finish_reason_regression() -> None:
    cmp = compare(trace(BASE), trace(BASE, finish="length"))
    assert cmp.first is not None and (cmp.first.kind, cmp.first.step) == ("finish_reason", 3)
    empty = compare(trace([]), trace([], finish="stop"))
    assert empty.first is not None and (empty.first.kind, empty.first.step) == ("finish_reason", 0)


def test_empty_generations_on_both_sides_are_identical() -> None:
    assert compare(trace([]), trace([])).verdict is Verdict.IDENTICAL
    assert compare(GenerationTrace(prompts=()), GenerationTrace(prompts=())).verdict is Verdict.IDENTICAL


def test_same_prompt_text_with_different_prompt_ids_is_a_prompt_regression() -> None:
    expected = trace(BASE)
    actual = dataclasses.replace(expected, prompts=(dataclasses.replace(expected.prompts[0], prompt_ids=(1, 3)),))
    cmp = compare(expected, actual)
    assert cmp.verdict is Verdict.REGRESSION
    assert cmp.first is not None and cmp.first.kind == "prompt" and "[1, 2] vs [1, 3]" in cmp.first.detail


def test_the_same_id_decoding_to_different_text_is_a_token_regression() -> None:
    actual = with_step(2, dataclasses.replace(BASE[2], token="!"))
    cmp = compare(trace(BASE), trace(actual))
    assert cmp.first is not None and (cmp.first.kind, cmp.first.step) == ("token", 2)
    assert cmp.first.expected_token_id == cmp.first.actual_token_id == 7


def test_a_token_that_just_fell_off_the_top_k_is_fine() -> None:
    actual = with_step(1, step([(4, -0.02), (5, -4.6), (1, -7.0001)]))  # ' cat' (-7.0) left, ' the' entered
    assert compare(trace(BASE), trace(actual)).verdict is Verdict.WITHIN_TOLERANCE


def test_a_token_entering_the_top_k_from_far_below_is_a_topk_regression() -> None:
    actual = with_step(1, step([(4, -0.02), (5, -4.6), (1, -6.0)]))
    cmp = compare(trace(BASE), trace(actual))
    assert cmp.first is not None and cmp.first.kind == "topk"
    assert "left the top-3" in cmp.first.detail


def test_a_different_top_k_size_is_a_topk_regression() -> None:
    actual = with_step(0, step([(3, -0.01), (5, -5.0)]))
    cmp = compare(trace(BASE), trace(actual))
    assert cmp.first is not None and cmp.first.kind == "topk" and cmp.first.detail == "top-k size 3 vs 2"


def test_nan_equals_nan_and_inf_equals_inf_but_not_a_number() -> None:
    odd = with_step(0, step([(3, math.nan), (5, -math.inf), (6, math.inf)]))
    assert compare(trace(odd), trace(odd)).verdict is Verdict.IDENTICAL
    finite = with_step(0, step([(3, -0.01), (5, -math.inf), (6, math.inf)]))
    cmp = compare(trace(odd), trace(finite), atol=1e9, rtol=1e9)
    assert cmp.verdict is Verdict.REGRESSION
    assert cmp.stats.max_abs == math.inf


def test_a_non_finite_value_against_a_number_is_named_as_such() -> None:
    # Before: "logprob nan vs -0.01 (|diff| inf > tol 0)" for a NaN edited into a snapshot by hand (issue 33).
    odd = with_step(0, step([(3, -0.01), (5, -5.0), (6, -6.0)], score=math.nan))
    cmp = compare(trace(odd), trace(BASE))
    assert cmp.verdict is Verdict.REGRESSION
    assert cmp.divergences[0].detail == "score nan vs -0.01 (the expected value is not a finite number)"
    assert "inf > tol" not in str(cmp)
    back = compare(trace(BASE), trace(with_step(0, step([(3, -0.01), (5, -math.inf), (6, -6.0)]))))
    assert back.divergences[0].detail == ("top_logprobs[1] (id 5) -5 vs -inf (the actual value is not a finite number)")


def test_negative_zero_equals_zero() -> None:
    a = with_step(0, step([(3, 0.0), (5, -5.0), (6, -6.0)]))
    b = with_step(0, step([(3, -0.0), (5, -5.0), (6, -6.0)]))
    assert compare(trace(a), trace(b)).verdict is Verdict.IDENTICAL


def test_the_worst_prompt_decides_the_verdict_and_each_prompt_reports_its_first_divergence() -> None:
    near = with_step(1, step([(4, -0.6931), (5, -0.6935), (6, -7.0)]))
    tie = with_step(1, step([(5, -0.6932), (4, -0.6934), (6, -7.0)]))
    expected = trace(near, BASE, BASE)
    actual = trace(tie, BASE, BASE[:2])
    actual = dataclasses.replace(
        actual, prompts=(*actual.prompts[:2], dataclasses.replace(actual.prompts[2], finish_reason="length"))
    )
    cmp = compare(expected, actual)
    assert cmp.verdict is Verdict.REGRESSION
    assert [d.prompt_index for d in cmp.divergences] == [0, 2]
    assert cmp.first is not None and cmp.first.tolerated
    assert [d.prompt_index for d in cmp.regressions] == [2]
    assert cmp.prompt_verdicts == (Verdict.TOLERATED, Verdict.IDENTICAL, Verdict.REGRESSION)


# ---------------------------------------------------------------------------------------------------- stale


def test_changed_weights_make_the_trace_stale_not_regressed() -> None:
    new_model = dataclasses.replace(MODEL, weights_hash="9f8e7d6c5b4a" + "3" * 52)
    cmp = compare(trace(BASE), trace(with_step(1, step([(5, -0.1), (4, -2.5)])), model=new_model))
    assert cmp.verdict is Verdict.STALE and not cmp
    assert cmp.stale_reasons == ("model changed: weights 1a2b3c4d5e6f -> 9f8e7d6c5b4a",)
    assert cmp.first is not None and cmp.first.kind == "token"  # still computed, for information
    assert compare(trace(BASE), trace(BASE, model=new_model), check_fingerprints=False).verdict is Verdict.IDENTICAL


def test_other_weights_from_the_same_fine_tuning_recipe_are_compared_not_stale() -> None:
    tuned = dataclasses.replace(MODEL, recipe="7" * 64)
    retrained = dataclasses.replace(tuned, weights_hash="9f8e7d6c5b4a" + "3" * 52)  # e.g. after a torch upgrade
    drifted = trace(with_step(1, step([(5, -0.1), (4, -2.5)])), model=retrained)
    cmp = compare(trace(BASE, model=tuned), drifted)
    assert cmp.verdict is Verdict.REGRESSION
    assert cmp.stale_reasons == ()
    assert compare(trace(BASE, model=tuned), trace(BASE, model=retrained)).verdict is Verdict.IDENTICAL


def test_another_fine_tuning_recipe_makes_the_trace_stale() -> None:
    old = dataclasses.replace(MODEL, recipe="7" * 64)
    new = dataclasses.replace(MODEL, recipe="8" * 64)
    (reason,) = compare(trace(BASE, model=old), trace(BASE, model=new)).stale_reasons
    assert reason == "model changed: training recipe 777777777777 -> 888888888888"


def test_weights_of_another_dtype_are_an_environment_difference_not_staleness() -> None:
    bf16 = dataclasses.replace(MODEL, weights_hash="9f8e7d6c5b4a" + "3" * 52, dtype="bfloat16")
    cmp = compare(trace(BASE), trace(BASE, model=bf16))
    assert cmp.stale_reasons == ()
    same_dtype = dataclasses.replace(bf16, dtype="float32")  # negative control: same dtype, other bytes
    assert compare(trace(BASE), trace(BASE, model=same_dtype)).verdict is Verdict.STALE


def test_changed_model_type_and_config_are_named() -> None:
    new_model = dataclasses.replace(MODEL, model_type="llama", config_hash="ffffffffffff")
    (reason,) = compare(trace(BASE), trace(BASE, model=new_model)).stale_reasons
    assert reason == "model changed: model_type gpt2 -> llama, config 1a2b3c4d5e6f -> ffffffffffff"


def test_a_changed_tokenizer_makes_the_trace_stale() -> None:
    new_tok = dataclasses.replace(TOKENIZER, hash="0123456789ab" + "4" * 52)
    cmp = compare(trace(BASE), trace(BASE, tokenizer=new_tok))
    assert cmp.verdict is Verdict.STALE
    assert cmp.stale_reasons == ("tokenizer changed: tiny abcdef012345 -> tiny 0123456789ab",)


OTHER_WEIGHTS = dataclasses.replace(MODEL, weights_hash="f" * 64)
GROWN = dataclasses.replace(TOKENIZER, hash="0123456789ab" + "4" * 52, vocab_size=514)
TEMPLATED = dataclasses.replace(
    TOKENIZER, chat_template="{{ bos }}\n{% for m in messages %}{{ m.content }}{% endfor %}"
)


def test_fingerprints_tokenizer_holds_traces_to_the_tokenizer_and_chat_template_not_the_model() -> None:
    """What a fidelity budget needs: a quantized copy's weights differ on purpose, its tokens must not."""
    tokenizer_only = Fingerprints.TOKENIZER
    assert compare(trace(BASE), trace(BASE, model=OTHER_WEIGHTS), check_fingerprints=tokenizer_only).stale_reasons == ()
    assert compare(trace(BASE), trace(BASE, model=OTHER_WEIGHTS)).verdict is Verdict.STALE  # control: the default
    counted = {"vocab": 512, "vocab_hash": "1a2b3c", "merges": 300, "merges_hash": "4d5e6f"}
    old = dataclasses.replace(TOKENIZER, parts=counted)
    new = dataclasses.replace(GROWN, parts={**counted, "vocab": 514, "vocab_hash": "7a8b9c"})
    cmp = compare(
        trace(BASE, tokenizer=old), trace(BASE, model=OTHER_WEIGHTS, tokenizer=new), check_fingerprints=tokenizer_only
    )
    assert cmp.verdict is Verdict.STALE
    assert cmp.stale_reasons == ("tokenizer changed: vocabulary size 512 -> 514, vocabulary 512 -> 514",)
    edited = dataclasses.replace(TEMPLATED, chat_template=TEMPLATED.chat_template.replace("content", "text"))
    (reason,) = compare(
        trace(BASE, tokenizer=TEMPLATED), trace(BASE, tokenizer=edited), check_fingerprints=tokenizer_only
    ).stale_reasons
    assert reason.startswith("chat template changed: line 2 at character ")
    assert "m.text" in reason
    assert compare(trace(BASE, tokenizer=TEMPLATED), trace(BASE, tokenizer=edited), check_fingerprints=False)  # NONE


def test_check_fingerprints_true_and_false_are_all_and_none() -> None:
    pairs = [(trace(BASE), trace(BASE, model=OTHER_WEIGHTS)), (trace(BASE), trace(BASE, tokenizer=GROWN))]
    for expected, actual in pairs:
        assert compare(expected, actual, check_fingerprints=True) == compare(
            expected, actual, check_fingerprints=Fingerprints.ALL
        )
        assert compare(expected, actual, check_fingerprints=False) == compare(
            expected, actual, check_fingerprints=Fingerprints.NONE
        )
    assert compare(*pairs[1], check_fingerprints=Fingerprints.NONE).stale_reasons == ()


def test_a_check_fingerprints_of_another_type_is_refused_naming_the_argument() -> None:
    with pytest.raises(
        TypeError, match=r"check_fingerprints must be True, False or a Fingerprints member.*'tokenizer'"
    ):
        compare(trace(BASE), trace(BASE), check_fingerprints="tokenizer")  # type: ignore[arg-type]


def test_changed_decoding_settings_make_the_trace_stale() -> None:
    cmp = compare(trace(BASE), trace(BASE, settings={**SETTINGS, "max_new_tokens": 32, "temperature": 0.7}))
    assert cmp.verdict is Verdict.STALE
    assert cmp.stale_reasons == ("decoding settings changed: max_new_tokens 24 -> 32, temperature (unset) -> 0.7",)
    typed = compare(trace(BASE), trace(BASE, settings={**SETTINGS, "do_sample": 0}))
    assert typed.verdict is Verdict.STALE  # False and 0 are different settings


def test_changed_prompts_make_the_trace_stale_and_only_matching_prompts_are_compared() -> None:
    cmp = compare(trace(BASE, BASE, prompts=["a", "b"]), trace(BASE, BASE[:1], BASE, prompts=["a", "c", "d"]))
    assert cmp.verdict is Verdict.STALE
    assert cmp.stale_reasons == ("prompts changed: 2 -> 3 prompts, prompt 1 'b' -> 'c'",)
    assert cmp.prompt_verdicts == (Verdict.IDENTICAL, None, None)


def test_fingerprints_on_one_side_only_do_not_make_a_trace_stale() -> None:
    assert compare(trace(BASE), trace(BASE, model=None, tokenizer=None)).verdict is Verdict.IDENTICAL


def test_environment_diff_lists_every_differing_field_sorted() -> None:
    actual = trace(BASE, environment={"device": "cpu", "torch": "2.12.0", "cuda": "12.4", "threads": 2})
    cmp = compare(trace(BASE, environment={"device": "cpu", "torch": "2.13.0", "threads": 2.0}), actual)
    assert cmp.verdict is Verdict.IDENTICAL  # the environment explains, it does not decide
    assert cmp.environment_diff == (("cuda", None, "12.4"), ("threads", 2.0, 2), ("torch", "2.13.0", "2.12.0"))


# ---------------------------------------------------------------------------------------------------- tolerances


@pytest.mark.parametrize(
    ("dtype", "expected"),
    [
        (None, FLOAT32),
        ("float32", FLOAT32),
        ("torch.float32", FLOAT32),
        ("fp32", FLOAT32),
        ("float64", FLOAT32),
        ("float16", FLOAT16),
        ("torch.float16", FLOAT16),
        ("half", FLOAT16),
        ("bfloat16", BFLOAT16),
        ("BF16", BFLOAT16),
        ("torch.bfloat16", BFLOAT16),
    ],
)
def test_default_tolerances_follow_the_dtype(dtype: str | None, expected: Tolerances) -> None:
    assert tolerances_for(dtype) == expected


def test_default_tolerance_values_are_hf_figures() -> None:
    assert Tolerances(1e-6, 1e-4, 1e-3, 8.0) == FLOAT32
    assert FLOAT16.lse_ulps == BFLOAT16.lse_ulps == LSE_ULPS  # the rounding of float32-computed logprobs
    assert (FLOAT16.atol, FLOAT16.rtol) == (5e-3, 5e-3)
    assert (BFLOAT16.atol, BFLOAT16.rtol, BFLOAT16.tie_tol) == (1e-2, 1e-2, 0.1)
    assert FLOAT32.tie_tol < FLOAT16.tie_tol < BFLOAT16.tie_tol


def test_an_unknown_dtype_is_an_error_naming_it_and_the_remedy() -> None:
    with pytest.raises(ValueError, match=r"unknown dtype 'int8'.*atol="):
        tolerances_for("int8")


def test_compare_takes_defaults_from_the_dtype_and_the_loosest_of_two() -> None:
    bf16_model = dataclasses.replace(MODEL, dtype="bfloat16")
    assert compare(trace(BASE), trace(BASE)).tolerances == FLOAT32
    assert compare(trace(BASE, model=bf16_model), trace(BASE, model=bf16_model)).tolerances == BFLOAT16
    assert compare(trace(BASE), trace(BASE, model=bf16_model)).tolerances == BFLOAT16
    assert compare(trace(BASE, model=bf16_model), trace(BASE)).tolerances == BFLOAT16
    drifted = with_step(1, step([(4, -0.02), (5, -4.63), (6, -7.0)]))
    assert not compare(trace(BASE), trace(drifted))
    assert compare(trace(BASE, model=bf16_model), trace(drifted, model=bf16_model))


def test_individual_overrides_win_over_tolerances_and_dtype_defaults() -> None:
    cmp = compare(trace(BASE), trace(BASE), tolerances=BFLOAT16, rtol=0.5)
    assert cmp.tolerances == Tolerances(1e-2, 0.5, 0.1, LSE_ULPS)
    assert compare(trace(BASE), trace(BASE), atol=1.0).tolerances == Tolerances(1.0, 1e-4, 1e-3, LSE_ULPS)
    assert FLOAT32.replace(tie_tol=0.5) == Tolerances(1e-6, 1e-4, 0.5, LSE_ULPS)
    assert compare(trace(BASE), trace(BASE), lse_ulps=0.0).tolerances == Tolerances(1e-6, 1e-4, 1e-3)
    drifted = with_step(1, step([(4, -0.02), (5, -4.5), (6, -7.0)]))
    assert compare(trace(BASE), trace(drifted), atol=0.2)


def test_exact_tolerances_reject_any_drift_and_any_split() -> None:
    drifted = with_step(1, step([(4, -0.02), (5, float32(-4.6) - 4.8e-7), (6, -7.0)]))
    assert compare(trace(BASE), trace(drifted)).verdict is Verdict.WITHIN_TOLERANCE
    assert compare(trace(BASE), trace(drifted), tolerances=EXACT).verdict is Verdict.REGRESSION
    tie_exp = with_step(1, step([(4, -0.5), (5, -0.5)]))
    tie_act = with_step(1, step([(5, -0.5), (4, -0.5)]))
    assert compare(trace(tie_exp), trace(tie_act)).verdict is Verdict.TOLERATED
    assert compare(trace(tie_exp), trace(tie_act), tolerances=EXACT).verdict is Verdict.REGRESSION


@pytest.mark.parametrize("bad", [{"atol": -1.0}, {"rtol": math.nan}, {"tie_tol": "0.1"}])
def test_invalid_tolerances_are_rejected_naming_the_field(bad: dict[str, object]) -> None:
    (name,) = bad
    with pytest.raises(ValueError, match=f"{name} must be a number >= 0"):
        compare(trace(BASE), trace(BASE), **bad)  # type: ignore[arg-type]


def test_comparing_something_that_is_not_a_trace_is_a_type_error_naming_the_argument() -> None:
    with pytest.raises(TypeError, match="actual must be a GenerationTrace, got str"):
        compare(trace(BASE), "{}")  # type: ignore[arg-type]


def test_verdict_ok_and_values() -> None:
    assert [v.ok for v in Verdict] == [True, True, True, False, False]
    assert Verdict.TOLERATED.value == "tolerated divergence" and str(Verdict.STALE) == "stale"
    assert isinstance(Verdict.REGRESSION, str) and f"{Verdict.REGRESSION}" == "regression"


def test_comparison_str_is_the_explanation_and_repr_stays_short() -> None:
    cmp = compare(trace(BASE), trace(with_step(1, step([(5, -0.1), (4, -2.5)]))))
    assert str(cmp).startswith("regression: prompt 0 'prompt 0' diverges at step 1")
    assert len(repr(cmp)) < 2000 and "expected=GenerationTrace" not in repr(cmp)


# ---------------------------------------------------------------------------------------------------- properties

DELTAS = (0.0, 0.0, 1e-7, -1e-6, 3e-5, -1e-3, 0.02, -0.5, 3.0)


@st.composite
def perturbed_steps(draw: st.DrawFn, path: tuple[Step, ...]) -> tuple[Step, ...]:
    out = []
    for s in path:
        move = draw(st.sampled_from(["keep", "keep", "drift", "flip", "enter", "cut"]))
        if move == "cut":
            break
        if move == "drift":
            d = draw(st.sampled_from(DELTAS))
            s = dataclasses.replace(
                s,
                logprob=float32(s.logprob + d),
                score=float32(s.score + draw(st.sampled_from(DELTAS))),
                top_logprobs=tuple(float32(v + draw(st.sampled_from(DELTAS))) for v in s.top_logprobs),
            )
        elif move == "flip":
            new_id = draw(st.sampled_from(s.top_ids) if s.top_ids else st.integers(0, 15))
            s = dataclasses.replace(s, token_id=new_id, token=draw(token_texts(max_size=3)))
        elif move == "enter" and s.top_ids:
            new_id = draw(st.sampled_from(sorted(set(range(41)) - set(s.top_ids))))
            last = s.top_logprobs[-1] + draw(st.sampled_from(DELTAS))
            s = dataclasses.replace(
                s, top_ids=(*s.top_ids[:-1], new_id), top_logprobs=(*s.top_logprobs[:-1], float32(last))
            )
        out.append(s)
    return tuple(out)


@st.composite
def related_pairs(draw: st.DrawFn, allow_nan: bool = False) -> tuple[GenerationTrace, GenerationTrace]:
    """A recorded trace and a plausible new one: drift, flipped tokens, top-k churn, cut paths, rare staleness."""
    base = draw(traces(allow_nan=allow_nan, max_prompts=2, max_steps=6))
    prompts = []
    for p in base.prompts:
        new_steps = draw(perturbed_steps(p.steps))
        finish = p.finish_reason if draw(st.integers(0, 4)) else draw(st.sampled_from(["eos", "length", "stop"]))
        prompts.append(dataclasses.replace(p, steps=new_steps, finish_reason=finish))
    actual = dataclasses.replace(base, prompts=tuple(prompts))
    if draw(st.integers(0, 9)) == 0:
        actual = dataclasses.replace(actual, settings={**actual.settings, "max_new_tokens": 99})
    if draw(st.booleans()):
        actual = dataclasses.replace(actual, environment=draw(environments()))
    return base, actual


def tolerance_values() -> st.SearchStrategy[Tolerances]:
    small = st.sampled_from([0.0, 1e-7, 1e-6, 1e-4, 1e-3, 0.01, 0.1, 1.0])
    return st.builds(Tolerances, small, small, small)


@PROPERTY
@given(traces(allow_nan=True))
def test_compare_is_reflexive_even_with_nan(t: GenerationTrace) -> None:
    assert compare(t, t).verdict is Verdict.IDENTICAL
    assert compare(t, GenerationTrace.from_json(t.to_json()), tolerances=EXACT).verdict is Verdict.IDENTICAL


@PROPERTY
@given(related_pairs(allow_nan=True), tolerance_values())
def test_verdicts_are_symmetric(pair: tuple[GenerationTrace, GenerationTrace], tol: Tolerances) -> None:
    a, b = pair
    assert compare(a, b, tolerances=tol).verdict is compare(b, a, tolerances=tol).verdict
    assert compare(a, b).verdict is compare(b, a).verdict


@PROPERTY
@given(related_pairs(), tolerance_values(), st.floats(1.0, 1e3), st.floats(1.0, 1e3), st.floats(1.0, 1e3))
def test_a_pass_stays_a_pass_under_looser_tolerances(
    pair: tuple[GenerationTrace, GenerationTrace], tol: Tolerances, fa: float, fr: float, ft: float
) -> None:
    a, b = pair
    looser = Tolerances(tol.atol * fa, tol.rtol * fr, tol.tie_tol * ft)
    if compare(a, b, tolerances=tol):
        assert compare(a, b, tolerances=looser)
    if not compare(a, b, tolerances=looser):
        assert not compare(a, b, tolerances=tol)


@PROPERTY
@given(traces(allow_nan=True, max_prompts=2), traces(allow_nan=True, max_prompts=2), st.booleans())
def test_compare_never_raises_on_any_pair_of_valid_traces(
    a: GenerationTrace, b: GenerationTrace, check_fingerprints: bool
) -> None:
    cmp = compare(a, b, check_fingerprints=check_fingerprints)
    assert isinstance(cmp, Comparison)
    assert len(cmp.divergences) <= min(len(a.prompts), len(b.prompts))
    assert str(cmp).startswith(cmp.verdict.value)


@PROPERTY
@given(related_pairs(allow_nan=True))
def test_related_pairs_compare_and_explain_without_raising(pair: tuple[GenerationTrace, GenerationTrace]) -> None:
    cmp = compare(*pair)
    text = str(cmp)
    assert text.startswith(cmp.verdict.value)
    assert cmp.stats.exceeded <= cmp.stats.compared
    if cmp.verdict is Verdict.IDENTICAL:
        assert cmp.stats.max_abs == 0 and not cmp.divergences
    if cmp.verdict is Verdict.TOLERATED:
        assert cmp.divergences and not cmp.regressions
    if cmp.verdict is Verdict.REGRESSION:
        assert cmp.regressions


def test_the_comparison_rule_and_its_explanation_import_only_the_standard_library() -> None:
    code = (
        "import sys, pytest_genguard.core.compare, pytest_genguard.core.comparison; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'transformers', 'hypothesis', 'numpy'}))"
    )
    root = str(Path(__file__).resolve().parents[2])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root)
    assert out.stdout.strip() == "[]"
