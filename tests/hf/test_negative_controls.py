"""The negative controls' deliberate bugs (tests/support/invariant_support.py) really break the model on the
transformers release installed, and a break that no longer reaches its target fails as a test defect instead of
letting its negative control pass for nothing (transformers 5.24 renamed the forward's `past_key_values` to `cache`,
and the cache break silently changed nothing). .ci/run runs this file on every transformers it tests."""

from __future__ import annotations

from typing import Any

import pytest
from invariant_support import (
    PROBES,
    Break,
    NegativeControlDefect,
    attention_mask_ignored,
    broken,
    cache_forgets_first_position,
    decode_positions_off_by_one,
    dropout_in_eval,
)

from pytest_genguard.hf.tiny import tiny_model, tiny_tokenizer

BREAKS = [dropout_in_eval, attention_mask_ignored, cache_forgets_first_position, decode_positions_off_by_one]


def _generate(model: Any, prompts: list[str]) -> Any:
    tokenizer = tiny_tokenizer()
    tokenizer.padding_side = "left"
    inputs = tokenizer(prompts, return_tensors="pt", padding=True)
    return model.generate(**inputs, max_new_tokens=4, do_sample=False, pad_token_id=tokenizer.pad_token_id)


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
@pytest.mark.parametrize("attach", BREAKS, ids=lambda f: f.__name__)
def test_every_break_changes_generation_on_this_release(arch: str, attach: Any) -> None:
    model = tiny_model(arch)
    prompts = [PROBES[0], PROBES[1] + " time"]  # two lengths: left padding, a prefill, then cached decode steps
    with broken(model, attach) as clone:
        _generate(clone, prompts)  # leaving `broken` raises NegativeControlDefect when the break changed nothing


def test_a_break_that_reaches_nothing_is_a_test_defect() -> None:
    def reads_a_removed_argument(model: Any, bug: Break) -> None:
        # What cache_forgets_first_position did on 5.24 while it read only `past_key_values`.
        def hook(mod: Any, args: Any, kwargs: dict[str, Any]) -> Any:
            if kwargs.get("an_argument_no_release_passes") is not None:
                bug.hit()
            return args, kwargs

        model.register_forward_pre_hook(hook, with_kwargs=True)

    defect = pytest.raises(NegativeControlDefect, match=r"'reads_a_removed_argument' changed nothing on transformers")
    with defect, broken(tiny_model("gpt2"), reads_a_removed_argument) as clone:
        _generate(clone, PROBES[:1])


def test_a_defect_is_not_swallowed_by_the_check_expecting_a_failure() -> None:
    # The negative controls wrap the invariant in pytest.raises(AssertionError): the defect must get through.
    defect = pytest.raises(NegativeControlDefect, match="'attention_mask_ignored' changed nothing")
    with defect, broken(tiny_model("gpt2"), attention_mask_ignored) as clone, pytest.raises(AssertionError):
        _generate(clone, PROBES[:1])  # one prompt: no padding, nothing for the break to change
        raise AssertionError("the invariant 'failed' for another reason")
