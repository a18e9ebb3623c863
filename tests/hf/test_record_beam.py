"""Beam search whose returned hypotheses end before the search does: recorded on every arch, step by step from the
beam that made each token, and verified by re-generation.

`generate()` with beams runs `len(scores)` steps but returns each prompt's best finished hypothesis; ``beam_indices``
and the generated part of ``sequences`` have one column per step of the longest *returned* one. When every returned
hypothesis ended (EOS) before the last beams did, those are fewer columns than steps: record() used to index past
them (``IndexError: index 10 is out of bounds for dimension 1 with size 10``, issue 12 item 1).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import transformers

from pytest_genguard import VerifyFallbackWarning, assert_well_formed, verify
from pytest_genguard.core.verdict import Verdict
from pytest_genguard.hf.record import generate_from_ids, record
from pytest_genguard.hf.teacher import teacher_force
from pytest_genguard.hf.tiny import ARCHS, probe_prompts, tiny_model, tiny_tokenizer


@pytest.fixture(scope="module", params=ARCHS)
def tuned(request: pytest.FixtureRequest, genguard_finetune: Callable[..., Any]) -> Any:
    """A fine-tuned model: it ends its probe sentences with EOS after 7 to 10 tokens, as a user's model would."""
    return genguard_finetune(request.param, pinned=False)  # no snapshot here: trained on this machine


def generate_beams(model: Any, tokenizer: Any, prompts: list[str], max_new_tokens: int, **kwargs: Any) -> Any:
    """generate() itself, for the premises: how many steps ran, how many columns came back, which rows."""
    import torch

    encoder_decoder = model.config.is_encoder_decoder
    old = tokenizer.padding_side
    tokenizer.padding_side = "right" if encoder_decoder else "left"
    try:
        batch = tokenizer(prompts, return_tensors="pt", padding=True)
    finally:
        tokenizer.padding_side = old
    with torch.no_grad():
        return model.generate(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            max_new_tokens=max_new_tokens,
            num_beams=3,
            return_dict_in_generate=True,
            output_scores=True,
            output_logits=True,
            **kwargs,
        )


# early_stopping="never" keeps searching after the best hypotheses ended (until no running beam can beat them): the
# returned ones then end steps before the search does, on every arch. The default stops sooner but not always.
CASES = [(24, "never"), (24, False), (9, False)]


@pytest.mark.parametrize(("max_new_tokens", "early_stopping"), CASES, ids=["never", "default", "some-reach-the-limit"])
def test_a_beam_trace_whose_hypotheses_end_early_is_recorded(
    tuned: Any, max_new_tokens: int, early_stopping: bool | str
) -> None:
    prompts = list(probe_prompts())
    kwargs = {"early_stopping": early_stopping}
    out = generate_beams(tuned.model, tuned.tokenizer, prompts, max_new_tokens, **kwargs)
    if early_stopping == "never":  # the premise of the crash: fewer returned columns than steps run
        assert out.beam_indices.shape[1] < len(out.scores)
    trace = record(tuned.model, tuned.tokenizer, prompts, max_new_tokens=max_new_tokens, num_beams=3, **kwargs)
    assert trace.settings["mode"] == "beam"
    assert_well_formed(trace)
    start = 1 if tuned.model.config.is_encoder_decoder else out.sequences.shape[1] - out.beam_indices.shape[1]
    for b, p in enumerate(trace):
        length = int((out.beam_indices[b] >= 0).sum())
        assert p.token_ids == tuple(out.sequences[b, start : start + length].tolist())  # generate()'s own path
        assert p.finish_reason == ("length" if length == max_new_tokens else "eos")
    assert any(p.finish_reason == "eos" and len(p.steps) < max_new_tokens for p in trace)


@pytest.mark.parametrize("arch", ARCHS)
def test_each_beam_step_carries_the_logprobs_of_the_beam_that_made_it(arch: str) -> None:
    model, tokenizer = tiny_model(arch), tiny_tokenizer()
    prompts = ["the quick", "once upon a time", "she"]
    out = generate_beams(model, tokenizer, prompts, 8)
    # The premise: an untrained model's beams reorder, so the returned hypotheses do not all come from each prompt's
    # first beam row; a step read from the wrong row of scores/logits would show another beam's distribution.
    first_rows = {b * 3 for b in range(len(prompts))}
    assert any(int(i) not in first_rows for row in out.beam_indices for i in row if i >= 0)
    trace = record(model, tokenizer, prompts, max_new_tokens=8, top_k=5, num_beams=3)
    forced = teacher_force(model, tokenizer, trace)  # one forward pass along the recorded paths
    for p, f in zip(trace, forced, strict=True):
        assert p.token_ids == f.token_ids
        for s, g in zip(p.steps, f.steps, strict=True):
            assert s.top_ids == g.top_ids
            assert s.logprob == pytest.approx(g.logprob, abs=1e-5)
            assert s.top_logprobs == pytest.approx(g.top_logprobs, abs=1e-5)
            # Beam scores are generate()'s float32 log-softmax, unprocessed; logprobs are genguard's, in float64.
            assert s.score == pytest.approx(s.logprob, abs=1e-5)


def test_verify_of_an_early_ending_beam_trace_regenerates_it(tuned: Any) -> None:
    trace = record(
        tuned.model, tuned.tokenizer, list(probe_prompts()), max_new_tokens=24, num_beams=3, early_stopping="never"
    )
    assert trace.settings["early_stopping"] == "never"  # re-generation runs with it again
    with pytest.warns(VerifyFallbackWarning, match="beam-search traces cannot be teacher forced"):
        result = verify(tuned.model, tuned.tokenizer, trace)
    assert result.regenerated and result.verdict is Verdict.IDENTICAL


def test_a_beam_hypothesis_ended_by_a_stop_string_keeps_no_padding(tuned: Any) -> None:
    if tuned.model.config.is_encoder_decoder and int(transformers.__version__.split(".")[0]) < 5:
        pytest.skip(
            "transformers 4.5x passes tokenizer= on to T5's forward() with stop_strings (generate() alone fails)"
        )
    tokenizer = tuned.tokenizer
    assert tokenizer.pad_token_id != tokenizer.eos_token_id  # the premise: padding is not mistaken for EOS
    prompts = list(probe_prompts())
    plain = record(tuned.model, tokenizer, prompts, max_new_tokens=24, num_beams=3)
    word = plain[0].text.split()[2]  # a word in the middle of the first sentence
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # transformers' notes on stop strings and beams
        stopped = record(tuned.model, tokenizer, prompts, max_new_tokens=24, num_beams=3, stop_strings=[word])
    first = stopped[0]
    assert first.finish_reason == "stop" and first.text.endswith(word)
    assert tokenizer.pad_token_id not in first.token_ids
    assert_well_formed(stopped)


@pytest.mark.parametrize("stop", [False, True], ids=["beams", "beams-and-a-stop-string"])
def test_generate_from_ids_records_what_record_records(tuned: Any, stop: bool) -> None:
    # One pipeline: beam path lengths, stop-string padding and the texts of alternatives apply to both entry points.
    if stop and tuned.model.config.is_encoder_decoder and int(transformers.__version__.split(".")[0]) < 5:
        pytest.skip("transformers 4.5x passes tokenizer= on to T5's forward() with stop_strings")
    tokenizer = tuned.tokenizer
    prompts = list(probe_prompts())
    kwargs: dict[str, Any] = {"num_beams": 3, "early_stopping": "never"}
    if stop:
        kwargs["stop_strings"] = [record(tuned.model, tokenizer, prompts, max_new_tokens=24)[0].text.split()[2]]
    rows = [list(tokenizer(p)["input_ids"]) for p in prompts]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # transformers' notes on stop strings and beams
        by_text = record(tuned.model, tokenizer, prompts, max_new_tokens=24, **kwargs)
        by_ids, _, _ = generate_from_ids(tuned.model, tokenizer, prompts, rows, max_new_tokens=24, **kwargs)
    assert any(len(p.steps) < 24 for p in by_text)  # hypotheses that ended early: path lengths matter
    assert by_ids.token_texts  # the texts of the alternatives no step chose
    assert by_ids.to_json() == by_text.to_json()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_trace_says_its_processed_scores_are_float32_and_they_are(dtype: str, tokenizer: Any) -> None:
    """The comparison rule rounds each value in the dtype the trace says it was computed in (`SCORES_FIELD`). Beam
    search's processed scores are float32 log-softmaxes whatever the model's dtype and genguard's float64 logprobs:
    what generate() returns says so, and so does the trace of record() and of teacher forcing."""
    import torch

    from pytest_genguard.core.environments import LOGPROBS_FIELD, SCORES_FIELD

    model = tiny_model("llama").to(getattr(torch, dtype))
    prompts = probe_prompts()[:2]
    rows = [tokenizer(p)["input_ids"] for p in prompts]
    trace, out, _ = generate_from_ids(model, tokenizer, prompts, rows, max_new_tokens=4, num_beams=3)
    assert {s.dtype for s in out.scores} == {torch.float32}
    assert trace.environment[SCORES_FIELD] == "float32" and trace.environment[LOGPROBS_FIELD] == "float64"
    assert teacher_force(model, tokenizer, trace).environment[SCORES_FIELD] == "float32"
