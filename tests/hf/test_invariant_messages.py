"""How invariant failures reach a person: one `invariant` event per check (first line as summary), genguard's own
frames hidden from the traceback, the counts in the terminal summary, internal record() calls kept out of them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from invariant_support import (
    PROBES,
    attention_mask_ignored,
    cache_forgets_first_position,
    decode_positions_off_by_one,
    hand_trace,
    noise_processor,
    with_break,
)

import pytest_genguard
from pytest_genguard.core.events import Event, to_json
from pytest_genguard.hf.record import record
from pytest_genguard.hf.tiny import tiny_model
from pytest_genguard.plugin.tally import EVENTS_KEY

LOOP = [(12, " sat")] * 6


@pytest.fixture(scope="module")
def model() -> Any:
    return tiny_model("gpt2")


def _events(request: pytest.FixtureRequest) -> list[Event]:
    return request.node.stash[EVENTS_KEY]


FAILING: dict[str, Callable[[Any, Any], None]] = {
    "assert_no_repetition": lambda m, t: pytest_genguard.assert_no_repetition(hand_trace(LOOP)),
    "assert_well_formed": lambda m, t: pytest_genguard.assert_well_formed(hand_trace(LOOP), eos_token_id=12),
    "assert_deterministic": lambda m, t: pytest_genguard.assert_deterministic(
        m, t, PROBES[:2], runs=2, max_new_tokens=4, logits_processor=noise_processor(2.0)
    ),
    "assert_batch_invariant": lambda m, t: with_break(
        m,
        attention_mask_ignored,
        lambda b: pytest_genguard.assert_batch_invariant(b, t, PROBES[:1], batch_sizes=(2,), max_new_tokens=4),
    ),
    "assert_cache_invariant": lambda m, t: with_break(
        m,
        cache_forgets_first_position,
        lambda b: pytest_genguard.assert_cache_invariant(b, t, PROBES[:2], max_new_tokens=4),
    ),
    "assert_continuation_consistent": lambda m, t: with_break(
        m,
        decode_positions_off_by_one,
        lambda b: pytest_genguard.assert_continuation_consistent(b, t, PROBES[:2], k=2, m=3),
    ),
    "assert_processor_contract": lambda m, t: pytest_genguard.assert_processor_contract(
        m, t, PROBES[:2], max_new_tokens=4, temperature=0.7, logits_processor=noise_processor(1.0)
    ),
}


@pytest.mark.parametrize("name", sorted(FAILING))
def test_a_failing_invariant_emits_one_event_and_hides_its_frames(
    name: str, model: Any, tokenizer: Any, request: pytest.FixtureRequest
) -> None:
    events = _events(request)
    with pytest.raises(AssertionError) as info:
        FAILING[name](model, tokenizer)
    try:
        message = str(info.value)
        assert message.startswith(f"{name}: ")
        assert [to_json(e) for e in events] == [
            {"kind": "invariant", "name": name, "ok": False, "failure": True, "summary": message.split("\n")[0]}
        ]
        # Frames of functions that set __tracebackhide__ are left out of the report: only this test's frame remains.
        shown = info.traceback.filter(info)
        # (the negative controls' own lambdas are this test's code: shown, and nothing of genguard's)
        names = [entry.frame.code.name for entry in shown]
        assert names[0] == request.node.originalname and set(names[1:]) == {"<lambda>"}, names
    finally:
        events.clear()  # a negative control failing on purpose is not a failed check of this run


def test_a_passing_invariant_emits_an_ok_event_and_its_internal_recordings_stay_out(
    model: Any, tokenizer: Any, request: pytest.FixtureRequest
) -> None:
    pytest_genguard.assert_cache_invariant(model, tokenizer, PROBES[:1], max_new_tokens=3)
    summary = {"kind": "invariant", "name": "assert_cache_invariant", "ok": True, "failure": False}
    assert [to_json(e) for e in _events(request)] == [{**summary, "summary": "assert_cache_invariant: ok"}]
    record(model, tokenizer, PROBES[:1], max_new_tokens=3)  # control: record() alone does emit
    assert [e.kind for e in _events(request)] == ["invariant", "record"]


TESTS = """
import pytest_genguard
from pytest_genguard.core.trace import GenerationTrace, PromptTrace, Step

def trace(ids):
    steps = tuple(Step(i, " w%d" % i, -0.1, 1.0, (i,), (-0.1,)) for i in ids)
    return GenerationTrace(prompts=(PromptTrace("hello", (1,), steps, "length"),), settings={"max_new_tokens": 8})

def test_varied():
    pytest_genguard.assert_no_repetition(trace([5, 6, 7, 8]))

def test_loop():
    pytest_genguard.assert_no_repetition(trace([5, 5, 5, 5, 5, 5, 5, 5]))

def test_eos_in_the_middle():
    pytest_genguard.assert_well_formed(trace([5, 2, 6]), eos_token_id=2)
"""


def test_failures_read_well_in_a_pytest_run_and_are_counted(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_invariants=TESTS)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        [
            "E*AssertionError: assert_no_repetition: 1 repetition in 1 of 1 prompt; first: prompt 0 'hello': token "
            "' w5' (id 5) repeats 8 times in a row at steps 0-7 (max_run 4): ' w5 w5 w5 w5 w5 w5 w5 w5'",
            "E*AssertionError: assert_well_formed: 2 problems in 1 of 1 prompt (exact checks); first: prompt 0 "
            "'hello': EOS (id 2) at step 1 is followed by 1 more tokens: ' w6'",
            "invariants: 3 checked, 2 failed",
        ]
    )
    result.stdout.no_fnmatch_line("*pytest_genguard*repetition.py:*")  # genguard's own frames are hidden
    result.stdout.no_fnmatch_line("*fail_or_pass*")
