"""The rule for distributions after truncation (`core.sampling`): a sampled step's support and processed
probabilities against another sampler's, each part with its negative control. The samplers here are exact
pure-Python models (tests/support/sampler_models.py) of transformers' processors (temperature, then top-p, then min-p)
and of llama.cpp's default order (temperature last), over random logits: the rule holds where only float error
differs and fails, naming the support or the probability, where the order differs."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings, strategies as st
from sampler_models import LLAMA_DEFAULT, VOCAB, chain

from pytest_genguard.core.jsontext import float32
from pytest_genguard.core.sampling import (
    SamplerReport,
    SamplerSettings,
    Served,
    judge_step,
    probability_bound,
)
from pytest_genguard.core.tolerances import FLOAT32
from pytest_genguard.core.trace import GenerationTrace, PromptTrace, Step, Support


def transformers_chain(logits: list[float], t: float, top_p: float = 1.0, min_p: float = 0.0) -> list[float]:
    return chain(logits, SamplerSettings(temperature=t, top_p=top_p, min_p=min_p), [])


def llama_default_chain(logits: list[float], t: float, top_p: float = 1.0, min_p: float = 0.0) -> list[float]:
    """top-p and min-p on the untempered logits, temperature last."""
    return chain(logits, SamplerSettings(temperature=t, top_p=top_p, min_p=min_p), [], order=LLAMA_DEFAULT)


def _logits(seed: int) -> list[float]:
    rng = random.Random(seed)
    return [rng.gauss(0.0, 2.0) for _ in range(VOCAB)]


def _step(probs: list[float], k: int = 5, low: int | None = None, high: int | None = None) -> Step:
    top = sorted(range(len(probs)), key=lambda i: -probs[i])[:k]
    kept = sum(1 for p in probs if p > 0)
    support = Support(kept, tuple(float32(probs[i]) for i in top), low or kept, high or kept)
    return Step(top[0], "x", -1.0, -1.0, tuple(top), tuple(-1.0 - r for r in range(k)), lse=12.0, support=support)


def _served(probs: list[float], asked: int) -> Served:
    entries = sorted(((i, p) for i, p in enumerate(probs) if p > 0), key=lambda e: -e[1])
    return Served(tuple(entries[:asked]), complete=len(entries) < asked)


def _judge(step: Step, served: Served, sampler: SamplerSettings, asked: int = 1000) -> str:
    return judge_step(step, served, sampler, FLOAT32, prompt=0, index=0, asked=asked).status


def test_a_sampling_trace_is_read_as_transformers_applied_it() -> None:
    assert SamplerSettings.of({"do_sample": False, "temperature": 0.7}) is None
    assert SamplerSettings.of({"do_sample": True, "num_beams": 4}) is None
    sampler = SamplerSettings.of({"do_sample": True, "temperature": 1.5, "top_p": 0.9, "top_k": None, "seed": 0})
    assert sampler is not None and sampler.top_k == 50  # generate()'s default when the config sets none
    assert sampler.describe() == "temperature 1.5, top_k 50, top_p 0.9"
    assert not sampler.unmapped
    custom = SamplerSettings.of({"do_sample": True, "logits_processor": "Ban", "no_repeat_ngram_size": 3})
    assert custom is not None and custom.unmapped == ("logits_processor", "no_repeat_ngram_size")


@pytest.mark.parametrize(("t", "top_p", "min_p"), [(1.5, 0.9, 0.0), (0.7, 0.9, 0.0), (0.7, 0.0, 0.1), (1.5, 1.0, 0.1)])
def test_the_same_chain_in_float32_is_within_and_llamas_default_order_is_outside(
    t: float, top_p: float, min_p: float
) -> None:
    sampler = SamplerSettings(temperature=t, top_p=top_p or 1.0, min_p=min_p)
    for seed in range(5):
        logits = _logits(seed)
        recorded = transformers_chain(logits, t, top_p or 1.0, min_p)
        step = _step(recorded)
        # the same processors on float32-rounded logits: float error only
        rounded = transformers_chain([float32(v) for v in logits], t, top_p or 1.0, min_p)
        assert _judge(step, _served(rounded, 1000), sampler) == "within"
        # negative control: temperature applied last (llama.cpp's default chain)
        other = llama_default_chain(logits, t, top_p or 1.0, min_p)
        result = judge_step(step, _served(other, 1000), sampler, FLOAT32, prompt=0, index=3, asked=1000)
        assert result.status == "outside", (seed, result)
        assert result.reason.startswith(("support: kept", "id ")), result.reason


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from([0.5, 0.7, 1.0, 1.5]))
def test_logits_moved_within_the_raw_rule_keep_the_probabilities_within_their_bound(seed: int, t: float) -> None:
    # Each raw logit gap to the top token moved by at most the float32 rule's allowance of that gap (atol + rtol *
    # |gap|): the processed probabilities stay within `probability_bound`.
    rng = random.Random(seed)
    logits = _logits(seed)
    sampler = SamplerSettings(temperature=t, top_k=0)
    top = max(logits)
    moved = [v + rng.uniform(-1, 1) * (FLOAT32.atol + FLOAT32.rtol * abs(top - v)) for v in logits]
    step = _step(transformers_chain(logits, t))
    assert _judge(step, _served(transformers_chain(moved, t), VOCAB + 1), sampler) == "within"


def test_a_probability_beyond_its_bound_is_outside_naming_the_token() -> None:
    sampler = SamplerSettings(temperature=1.0)
    probs = transformers_chain(_logits(1), 1.0)
    step = _step(probs)
    assert step.support is not None
    victim = step.top_ids[1]
    p = probs[victim]
    bound = probability_bound(FLOAT32, sampler, math.log(max(probs) / p), math.log(max(probs)) + math.log(VOCAB), 12.0)
    for factor, expected in ((0.5, "within"), (3.0, "outside")):
        moved = list(probs)
        moved[victim] = p * math.exp(factor * bound)
        result = judge_step(step, _served(moved, VOCAB + 1), sampler, FLOAT32, prompt=0, index=0, asked=VOCAB + 1)
        assert result.status == expected, result
    assert result.reason.startswith(f"id {victim}: probability ")


def test_a_support_inside_the_near_threshold_range_is_tolerated_and_one_outside_is_not() -> None:
    sampler = SamplerSettings(temperature=1.0, top_p=0.9)
    probs = transformers_chain(_logits(2), 1.0, 0.9)
    kept = sum(1 for p in probs if p > 0)
    step = _step(probs, low=kept - 2, high=kept + 2)
    longer = transformers_chain(_logits(2), 1.0, 0.902)  # one or two more tail tokens: within float error here
    n = sum(1 for p in longer if p > 0)
    assert kept < n <= kept + 2
    assert _judge(step, _served(longer, kept + 3), sampler) == "within"
    tight = _step(probs)  # recorded with no near-threshold token: the same longer support is outside
    result = judge_step(tight, _served(longer, kept + 3), sampler, FLOAT32, prompt=1, index=2, asked=kept + 3)
    assert result.status == "outside" and result.reason == f"support: kept {kept}, served {n}"


def test_a_support_the_server_cannot_show_is_unproven_never_within() -> None:
    sampler = SamplerSettings(temperature=1.0, top_p=0.99)
    probs = transformers_chain(_logits(3), 1.0, 0.99)
    kept = sum(1 for p in probs if p > 0)
    step = _step(probs)
    capped = judge_step(step, _served(probs, 20), sampler, FLOAT32, prompt=0, index=0, asked=20)
    assert capped.status == "unproven"
    assert capped.reason == f"support not seen: the server returned its top-20, recorded at least {kept}"
    # a full answer of more than the snapshot kept: proven longer
    wider = transformers_chain(_logits(3), 1.0, 1.0)
    longer = judge_step(step, _served(wider, kept + 1), sampler, FLOAT32, prompt=0, index=0, asked=kept + 1)
    assert longer.status == "outside" and longer.reason.startswith(f"support: served at least {kept + 1} tokens")


def test_a_step_without_a_recorded_support_cannot_be_judged() -> None:
    step = Step(1, "x", -1.0, -1.0, (1,), (-1.0,))
    with pytest.raises(ValueError, match="no recorded support"):
        judge_step(step, Served(((1, 1.0),), True), SamplerSettings(), FLOAT32, prompt=0, index=0, asked=2)


def test_the_report_says_its_status_what_was_sent_and_the_first_step_that_differs() -> None:
    sampler = SamplerSettings(temperature=1.5, top_p=0.9)
    logits = _logits(4)
    step = _step(transformers_chain(logits, 1.5, 0.9))
    good = judge_step(
        step, _served(transformers_chain(logits, 1.5, 0.9), 1000), sampler, FLOAT32, prompt=0, index=0, asked=1000
    )
    bad = judge_step(
        step, _served(llama_default_chain(logits, 1.5, 0.9), 1000), sampler, FLOAT32, prompt=0, index=1, asked=1000
    )
    report = SamplerReport(steps=(good, bad), sent={"temperature": 1.5, "samplers": '["top_k"]'}, aligned=())
    assert report.status == "outside" and report.first_failure is bad
    lines = report.lines()
    assert lines[0].startswith("sampler outside: 2 sampled steps, 1 outside; max |Δp| ")
    assert lines[1] == '  sent per step: temperature=1.5, samplers="[\\"top_k\\"]"'
    assert lines[2].startswith("  prompt 0 step 1: support: kept ")
    assert "cause unknown" in lines[3]
    assert SamplerReport(steps=(good,)).status == "within"
    assert SamplerReport(not_judged="no support").status == "unproven"


def test_a_sampled_steps_support_round_trips_and_greedy_steps_keep_their_bytes() -> None:
    greedy = Step(5, " a", -0.5, -0.5, (5, 6), (-0.5, -1.5), lse=3.0)
    sampled = Step(5, " a", -0.5, -0.25, (5, 6), (-0.5, -1.5), lse=3.0, support=Support(21, (0.51, 0.0), 20, 22))
    trace = GenerationTrace(prompts=(PromptTrace("p", (1,), (greedy, sampled), "length"),))
    text = trace.to_json()
    lines = [line for line in text.splitlines() if '"id": 5' in line]
    assert '"kept"' not in lines[0] and '"probs"' not in lines[0]
    assert lines[1].endswith('"top_logprobs": [-0.5, -1.5], "kept": 21, "kept_range": [20, 22], "probs": [0.51, 0.0]}')
    again = GenerationTrace.from_json(text)
    stored = Support(21, (float32(0.51), 0.0), 20, 22)  # probabilities are float32, as recorded
    assert again.prompts[0].steps[1].support == stored and again.prompts[0].steps[0].support is None
    exact = text.replace(', "kept_range": [20, 22]', "")
    assert GenerationTrace.from_json(exact).prompts[0].steps[1].support == Support(21, stored.probs, 21, 21)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ('"kept_range": [22, 30]', "expected [low, high] around kept 21"),
        ('"probs": [0.51]', "probs has 1 entries but top_ids has 2"),
    ],
)
def test_a_damaged_support_names_the_file_and_the_step(edit: str, message: str) -> None:
    from pytest_genguard.core.errors import TraceFormatError

    sampled = Step(5, " a", -0.5, -0.25, (5, 6), (-0.5, -1.5), support=Support(21, (0.51, 0.0), 20, 22))
    text = GenerationTrace(prompts=(PromptTrace("p", (1,), (sampled,), "length"),)).to_json()
    key = edit.split(":")[0]
    start = text.index(key)
    end = text.index("]", start) + 1
    with pytest.raises(
        TraceFormatError, match=r"snap\.genguard: prompts\[0\]\.steps\[0\].*" + message.replace("[", r"\[")
    ):
        GenerationTrace.from_json(text[:start] + edit + text[end:], source="snap.genguard")


def test_a_sampled_steps_support_costs_at_most_120_bytes_on_its_line() -> None:
    # The trace size budget is the greedy one's (tests/core/test_trace_json.py: 100 steps of top-5 in 25 KB): a
    # sampled step adds its best score and its support, not the whole support (2,584 ids and probabilities at
    # temperature 1.5 and top-p 0.9 on SmolLM2-135M). The widest support line: a five-digit count, a range, five
    # 9-digit probabilities.
    probs = tuple(float32(v) for v in (0.123456789, 0.0987654321, 0.0876543219, 0.0765432198, 0.0654321987))
    plain = Step(5, " a", -0.5, -0.25, (50001, 50002, 50003, 50004, 50005), (-0.5, -1.5, -2.5, -3.5, -4.5))
    sampled = Step(**{**plain.__dict__, "support": Support(25840, probs, 25700, 25990)})
    width = len(GenerationTrace(prompts=(PromptTrace("p", (1,), (sampled,), "length"),)).to_json())
    base = len(GenerationTrace(prompts=(PromptTrace("p", (1,), (plain,), "length"),)).to_json())
    print(f"support: {width - base} bytes per step")
    assert width - base <= 120
