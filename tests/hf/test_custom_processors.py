"""A user's own logits processors: record() names them in the trace, assert_well_formed holds the chosen tokens to the
processed scores they made, a changed list makes a snapshot stale, and verify() re-applies them or refuses."""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import pytest
import torch
from invariant_support import PROBES, caught
from snapshot_support import run
from transformers import LogitsProcessor, LogitsProcessorList

from pytest_genguard import GenerationTrace, VerifyFallbackWarning, assert_well_formed, compare, verify
from pytest_genguard.core import events
from pytest_genguard.core.verdict import Verdict
from pytest_genguard.hf.record import record


class BanTokens(LogitsProcessor):
    """Rules tokens out (-inf): greedy then leaves the raw argmax wherever it would have chosen one of them."""

    def __init__(self, ids: list[int]) -> None:
        self.ids = ids

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        out = scores.clone()
        out[:, self.ids] = -float("inf")
        return out  # type: ignore[return-value]


class Halve(LogitsProcessor):
    """Scales scores: the ranking stays, the processed scores change."""

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        return scores / 2  # type: ignore[return-value]


@pytest.fixture(scope="module")
def ban(gpt2: Any, tokenizer: Any) -> BanTokens:
    """Bans every token the plain greedy paths choose, so each step of the banned paths leaves the raw argmax."""
    plain = record(gpt2, tokenizer, PROBES[:2], max_new_tokens=6)
    return BanTokens(sorted({s.token_id for p in plain for s in p.steps}))


@pytest.fixture(scope="module")
def banned(gpt2: Any, tokenizer: Any, ban: BanTokens) -> GenerationTrace:
    return record(gpt2, tokenizer, PROBES[:2], max_new_tokens=6, logits_processor=LogitsProcessorList([ban]))


def test_record_names_the_custom_processors_in_the_settings_in_the_order_they_run(
    gpt2: Any, tokenizer: Any, ban: BanTokens
) -> None:
    two = record(gpt2, tokenizer, "the", max_new_tokens=2, logits_processor=LogitsProcessorList([Halve(), ban]))
    assert two.settings["logits_processor"] == "Halve,BanTokens"
    assert '"logits_processor": "Halve,BanTokens"' in two.to_json()  # a plain scalar in the settings block
    assert GenerationTrace.from_json(two.to_json()).settings["logits_processor"] == "Halve,BanTokens"
    plain = record(gpt2, tokenizer, "the", max_new_tokens=2)
    assert "logits_processor" not in plain.settings  # traces without custom processors read exactly as before
    assert "logits_processor" not in record(gpt2, tokenizer, "the", max_new_tokens=2, logits_processor=[]).settings


def test_a_greedy_trace_made_with_a_custom_processor_is_well_formed(banned: GenerationTrace) -> None:
    # The premise: the processor re-ranked, so chosen tokens leave the raw argmax (the first step of each prompt
    # must: its raw argmax is a token the plain path chose).
    assert all(p.steps[0].token_id != p.steps[0].top_ids[0] for p in banned)
    assert_well_formed(banned)  # issue 12 item 7: this raised "greedy ... must choose the raw argmax"


def test_the_chosen_token_is_still_held_to_the_processed_scores(banned: GenerationTrace) -> None:
    # Negative control: a step whose chosen token is not the best processed score (something sampled after the
    # processors) is caught in a trace with custom processors too.
    p = banned.prompts[0]
    steps = list(p.steps)
    steps[1] = dataclasses.replace(steps[1], best_score=steps[1].score + 0.5)
    broken = dataclasses.replace(banned, prompts=(dataclasses.replace(p, steps=tuple(steps)), *banned.prompts[1:]))
    with caught(match="greedy chose a token whose processed score .* is below the step's best"):
        assert_well_formed(broken)


def test_a_changed_list_of_custom_processors_is_a_settings_change(
    gpt2: Any, tokenizer: Any, ban: BanTokens, banned: GenerationTrace
) -> None:
    plain = record(gpt2, tokenizer, PROBES[:2], max_new_tokens=6)
    added = compare(plain, banned)
    assert added.verdict is Verdict.STALE
    assert added.stale_reasons == ("decoding settings changed: logits_processor (unset) -> 'BanTokens'",)
    halved = record(gpt2, tokenizer, PROBES[:2], max_new_tokens=6, logits_processor=LogitsProcessorList([Halve()]))
    swapped = compare(banned, halved)
    assert swapped.verdict is Verdict.STALE
    assert "logits_processor 'BanTokens' -> 'Halve'" in swapped.stale_reasons[0]
    again = record(gpt2, tokenizer, PROBES[:2], max_new_tokens=6, logits_processor=LogitsProcessorList([ban]))
    assert compare(banned, again).verdict is Verdict.IDENTICAL  # the same list: not stale


def test_verify_refuses_a_trace_whose_custom_processors_it_was_not_given(
    gpt2: Any, tokenizer: Any, banned: GenerationTrace
) -> None:
    with pytest.raises(ValueError, match=r"^verify\(\): the trace was recorded with custom logits processors "):
        verify(gpt2, tokenizer, banned)
    with pytest.raises(ValueError, match="logits_processor names Halve but the trace was recorded with BanTokens"):
        verify(gpt2, tokenizer, banned, logits_processor=LogitsProcessorList([Halve()]))
    plain = record(gpt2, tokenizer, PROBES[:2], max_new_tokens=6)
    with pytest.raises(ValueError, match="but the trace was recorded with no custom logits processors"):
        verify(gpt2, tokenizer, plain, logits_processor=LogitsProcessorList([Halve()]))


def test_verify_reapplies_the_custom_processors_it_is_given(
    gpt2: Any, tokenizer: Any, ban: BanTokens, banned: GenerationTrace
) -> None:
    assert verify(gpt2, tokenizer, banned, logits_processor=LogitsProcessorList([ban]))
    # Negative control: the processors really are applied: banning other tokens moves the greedy path.
    other = BanTokens(ban.ids[1:])
    with events.muted():  # a verification failing on purpose is not a failed check of this run
        moved = verify(gpt2, tokenizer, banned, logits_processor=LogitsProcessorList([other]))
    assert not moved.ok and moved.verdict is Verdict.REGRESSION


def test_a_beam_trace_with_custom_processors_is_regenerated_with_them(
    gpt2: Any, tokenizer: Any, ban: BanTokens
) -> None:
    beam = record(
        gpt2, tokenizer, PROBES[:2], max_new_tokens=5, num_beams=2, logits_processor=LogitsProcessorList([ban])
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", VerifyFallbackWarning)
        again = verify(gpt2, tokenizer, beam, logits_processor=LogitsProcessorList([ban]))
        assert again.regenerated and again.verdict is Verdict.IDENTICAL
        with pytest.raises(ValueError, match="recorded with custom logits processors \\(BanTokens\\)"):
            verify(gpt2, tokenizer, beam)


PROJECT = """
import json
from pathlib import Path

import torch
from transformers import LogitsProcessor, LogitsProcessorList

from pytest_genguard import record, tiny_model, tiny_tokenizer


class Halve(LogitsProcessor):
    def __call__(self, input_ids, scores):
        return scores / 2


class Double(LogitsProcessor):
    def __call__(self, input_ids, scores):
        return scores * 2


def test_custom(genguard_snapshot):
    chosen = json.loads((Path(__file__).parent / "chosen.json").read_text())
    processors = LogitsProcessorList([{"Halve": Halve, "Double": Double}[chosen]()])
    trace = record(tiny_model("gpt2"), tiny_tokenizer(), ["the quick"], max_new_tokens=3, logits_processor=processors)
    assert trace == genguard_snapshot
"""


def test_a_snapshot_recorded_with_other_custom_processors_is_stale(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_custom=PROJECT)
    chosen = pytester.path / "chosen.json"
    chosen.write_text('"Halve"')
    run(pytester, "--snapshot-update").assert_outcomes(passed=1)
    snapshot = pytester.path / "__snapshots__" / "test_custom" / "test_custom.genguard"
    assert '"logits_processor": "Halve"' in snapshot.read_text(encoding="utf-8")
    run(pytester).assert_outcomes(passed=1)
    chosen.write_text('"Double"')  # the same greedy path (scaling keeps the ranking): only the settings tell
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*stale: decoding settings changed: logits_processor 'Halve' -> 'Double'*"])
    run(pytester, "--genguard-update-stale").assert_outcomes(passed=1)
    assert '"logits_processor": "Double"' in snapshot.read_text(encoding="utf-8")


VERIFY_PROJECT = """
from transformers import LogitsProcessor, LogitsProcessorList

from pytest_genguard import tiny_model, tiny_tokenizer


class Halve(LogitsProcessor):
    def __call__(self, input_ids, scores):
        return scores / 2


def test_verified(genguard_snapshot):
    processors = LogitsProcessorList([Halve()])
    genguard_snapshot.verify(
        tiny_model("gpt2"), tiny_tokenizer(), ["the quick"], max_new_tokens=4, logits_processor=processors
    )
"""


def test_the_snapshot_fixtures_verify_re_applies_the_custom_processors_it_recorded_with(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_verify_custom=VERIFY_PROJECT)
    run(pytester, "--snapshot-update").assert_outcomes(passed=1)
    snapshot = pytester.path / "__snapshots__" / "test_verify_custom" / "test_verified.genguard"
    assert '"logits_processor": "Halve"' in snapshot.read_text(encoding="utf-8")
    run(pytester).assert_outcomes(passed=1)  # teacher-forced with the same processor: not "cannot rebuild"
