"""assert_batch_invariant, assert_cache_invariant, assert_continuation_consistent: hold on the tiny models, and catch a
broken padding mask, a corrupted KV cache and an incremental-decoding position bug."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from invariant_support import (
    PROBES,
    attention_mask_ignored,
    broken,
    cache_forgets_first_position,
    caught,
    decode_positions_off_by_one,
)

from pytest_genguard import (
    Tolerances,
    assert_batch_invariant,
    assert_cache_invariant,
    assert_continuation_consistent,
)
from pytest_genguard.hf.tiny import tiny_model, tiny_tokenizer


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def tuned(request: pytest.FixtureRequest, genguard_finetune: Callable[..., Any]) -> Any:
    return genguard_finetune(request.param, pinned=False)  # no snapshot here: trained on this machine


def test_a_prompt_generates_the_same_alone_and_in_left_padded_batches(tuned: Any) -> None:
    assert_batch_invariant(tuned.model, tuned.tokenizer, PROBES, batch_sizes=(3,), max_new_tokens=8)


def test_batched_float32_on_cpu_is_not_bitwise_so_the_rule_is_tolerant(genguard_finetune: Callable[..., Any]) -> None:
    # Why the default is the tolerant rule: batched kernels reduce in another order, even in float32 on CPU.
    tuned = genguard_finetune("gpt2")
    with caught(match=r"generates differently than alone \(bitwise\)"):
        assert_batch_invariant(
            tuned.model, tuned.tokenizer, PROBES[:2], batch_sizes=(4,), max_new_tokens=8, tolerances=Tolerances(0, 0, 0)
        )


def test_a_model_that_attends_to_padding_is_caught(tuned: Any) -> None:
    # Negative control: the attention mask is dropped, so left-padding tokens are attended in a batch.
    with broken(tuned.model, attention_mask_ignored) as model, caught() as info:
        assert_batch_invariant(model, tuned.tokenizer, PROBES[:2], batch_sizes=(3,), max_new_tokens=8)
    first = str(info.value).splitlines()[0]
    assert first.startswith("assert_batch_invariant: prompt ")
    assert "of a batch of 3, padded by " in first and "generates differently than alone (tolerant rule: atol" in first
    assert "(expected = alone, actual = in the batch)" in str(info.value)


def test_encoder_decoder_batches_are_checked_too() -> None:
    # T5 pads on the right; an untrained T5 still must not care about its batch.
    assert_batch_invariant(tiny_model("t5"), tiny_tokenizer(), PROBES[:2], batch_sizes=(3,), max_new_tokens=6)


def test_sampling_cannot_be_batch_invariant(tuned: Any) -> None:
    with pytest.raises(ValueError, match="sampling draws depend on the batch"):
        assert_batch_invariant(tuned.model, tuned.tokenizer, PROBES, do_sample=True)


def test_the_kv_cache_changes_nothing(tuned: Any) -> None:
    assert_cache_invariant(tuned.model, tuned.tokenizer, PROBES, max_new_tokens=8)
    assert_cache_invariant(tuned.model, tuned.tokenizer, PROBES, max_new_tokens=8, do_sample=True, seed=3)


def test_a_cache_that_loses_entries_is_caught(tuned: Any) -> None:
    # Negative control: the cached values of the first position are zeroed whenever the cache is reused.
    with broken(tuned.model, cache_forgets_first_position) as model, caught() as info:
        assert_cache_invariant(model, tuned.tokenizer, PROBES, max_new_tokens=8)
    text = str(info.value)
    assert text.startswith("assert_cache_invariant: generating with the KV cache differs from generating without it")
    assert "(expected = use_cache=False, actual = use_cache=True)" in text
    with pytest.raises(ValueError, match="do not pass use_cache"):
        assert_cache_invariant(tuned.model, tuned.tokenizer, PROBES, use_cache=False)


def test_continuing_from_ids_matches_generating_at_once(tuned: Any) -> None:
    assert_continuation_consistent(tuned.model, tuned.tokenizer, PROBES, k=3, m=4)
    assert_continuation_consistent(tuned.model, tuned.tokenizer, PROBES, k=2, m=4, repetition_penalty=1.3)


def test_continuation_of_an_encoder_decoder_model_feeds_the_decoder() -> None:
    assert_continuation_consistent(tiny_model("t5"), tiny_tokenizer(), PROBES[:2], k=2, m=3)


def test_a_position_bug_in_incremental_decoding_is_caught(tuned: Any) -> None:
    # Negative control: one-token decode steps get position ids one too high; a multi-token prefill does not.
    with broken(tuned.model, decode_positions_off_by_one) as model, caught() as info:
        assert_continuation_consistent(model, tuned.tokenizer, PROBES, k=3, m=4)
    text = str(info.value)
    assert text.startswith("assert_continuation_consistent: continuing after 3 tokens differs from generating 7")
    assert "(expected = 7 tokens at once, actual = 3 tokens, then continued from their ids)" in text
    assert "at step 3" in text  # the first continued token: the earlier ones are the same ids on both sides


def test_continuation_arguments_are_checked(tuned: Any) -> None:
    with pytest.raises(ValueError, match="only greedy decoding continues deterministically"):
        assert_continuation_consistent(tuned.model, tuned.tokenizer, PROBES, num_beams=2)
    with pytest.raises(ValueError, match="every prompt ends within k=30 tokens"):
        assert_continuation_consistent(tuned.model, tuned.tokenizer, PROBES, k=30, m=2)
    for bad, shown in (
        ({"k": 0}, "k must be an integer >= 1, got 0."),
        ({"m": 2.5}, "m must be an integer >= 1, got 2.5"),
    ):
        with pytest.raises(ValueError, match=re.escape(f"assert_continuation_consistent: {shown}")):
            assert_continuation_consistent(tuned.model, tuned.tokenizer, PROBES, **bad)
