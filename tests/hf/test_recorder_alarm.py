"""GenerationRecorder(on_degenerate=...): a model that loops is reported while it trains ("warn") or stops the run
("stop"), with the rule and defaults of assert_no_repetition; a model that does not loop trains on undisturbed."""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from invariant_support import caught
from recorder_support import private_copy, trainer
from transformers import TrainerControl, TrainerState, TrainingArguments

from pytest_genguard import GenguardTrainingWarning
from pytest_genguard.core.repetition import assert_no_repetition, find_repetition
from pytest_genguard.hf.record import record
from pytest_genguard.hf.recorder import GenerationRecorder
from pytest_genguard.hf.tiny import probe_prompts, tiny_model, tiny_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")  # (tests/hf/conftest.py)

PROBES = probe_prompts()[:2]
LOOP = re.compile(r"GenerationRecorder: the model loops at step (\d+) \((\w+)\): .*prompt \d+ '[^']*'.*: '[^']+'")


@pytest.fixture(scope="module")
def looping_model() -> Any:
    """An untrained tiny GPT-2: it repeats itself. Checked here, so a model that stopped looping fails loudly."""
    model = tiny_model("gpt2")
    assert find_repetition(record(model, tiny_tokenizer(), PROBES, max_new_tokens=24)).prompts
    return model


def _train(tmp: Path, model: Any, recorder: GenerationRecorder, **overrides: Any) -> tuple[Any, list[str]]:
    """Six steps at a tiny learning rate (the model stays what it was), recording every 2 steps."""
    run = trainer(tmp, "gpt2", model=private_copy(model), callbacks=[recorder], learning_rate=1e-6, **overrides)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run.train()
    return run, [str(w.message) for w in caught if issubclass(w.category, GenguardTrainingWarning)]


def test_warn_reports_each_looping_checkpoint_with_step_prompt_and_span_and_trains_on(
    looping_model: Any, tmp_path: Path
) -> None:
    recorder = GenerationRecorder(PROBES, every_n_steps=2, on_degenerate="warn")
    run, messages = _train(tmp_path, looping_model, recorder)
    assert run.state.global_step == 6
    assert [LOOP.match(m).groups() if LOOP.match(m) else m for m in messages] == [  # type: ignore[union-attr]
        ("2", "step"),
        ("4", "step"),
        ("6", "step"),
    ]
    # The message is assert_no_repetition's own finding about that checkpoint's trace.
    with caught() as failure:
        assert_no_repetition(recorder.history[0].trace)
    assert find_repetition(recorder.history[0].trace).headline in messages[0]
    assert find_repetition(recorder.history[0].trace).headline in str(failure.value)


def test_stop_ends_training_at_the_first_looping_checkpoint(looping_model: Any, tmp_path: Path) -> None:
    recorder = GenerationRecorder(PROBES, every_n_steps=2, on_degenerate="stop")
    run, messages = _train(tmp_path, looping_model, recorder)
    assert run.state.global_step == 2  # of max_steps 6
    assert [(c.step, c.event) for c in recorder.history] == [(2, "step")]  # train_end: the same weights
    assert len(messages) == 1
    assert messages[0].startswith("GenerationRecorder: the model loops at step 2 (step)")
    assert messages[0].endswith("training stops here (on_degenerate='stop')")


def test_an_evaluation_that_loops_names_the_evaluated_example(looping_model: Any, tmp_path: Path) -> None:
    recorder = GenerationRecorder(eval_examples=2, on_degenerate="warn")
    run = trainer(tmp_path, "gpt2", model=looping_model, callbacks=[recorder])
    with pytest.warns(GenguardTrainingWarning, match=r"loops at step 0 \(evaluate\)") as caught:
        run.evaluate()
    example = recorder.history[0].trace.prompts[find_repetition(recorder.history[0].trace).prompts[0]].prompt
    assert f"'{example}'" in str(caught[0].message)


def test_without_on_degenerate_a_looping_model_is_not_reported(looping_model: Any, tmp_path: Path) -> None:
    recorder = GenerationRecorder(PROBES, every_n_steps=2)
    run, messages = _train(tmp_path, looping_model, recorder)
    assert messages == [] and run.state.global_step == 6
    assert all(find_repetition(c.trace) for c in recorder.history)  # it did loop


def test_a_fine_tuned_model_that_does_not_loop_trains_to_the_end_without_a_warning(
    genguard_finetune: Callable[..., Any], tmp_path: Path
) -> None:
    """Negative control: the same alarm ("stop", every step and at every evaluation) on a model that stops."""
    tuned = genguard_finetune("gpt2")
    recorder = GenerationRecorder(PROBES, eval_examples=4, every_n_steps=1, on_degenerate="stop")
    run, messages = _train(tmp_path, tuned.model, recorder, eval_strategy="steps", eval_steps=3)
    assert messages == []
    assert run.state.global_step == 6
    assert len(recorder.history) == 8  # 6 steps and 2 evaluations
    assert not any(find_repetition(c.trace) for c in recorder.history)


def test_a_checkpoint_is_checked_once_a_model_that_stops_looping_is_not_flagged_again(
    looping_model: Any, genguard_finetune: Callable[..., Any], tmp_path: Path
) -> None:
    tokenizer = tiny_tokenizer()
    recorder = GenerationRecorder(PROBES, every_n_steps=1, on_degenerate="warn", tokenizer=tokenizer)
    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none")

    def step(n: int, model: Any) -> list[str]:
        state = TrainerState(global_step=n)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            recorder.on_step_end(args, state, TrainerControl(), model=model)
        return [str(w.message) for w in caught if issubclass(w.category, GenguardTrainingWarning)]

    assert len(step(1, looping_model)) == 1
    assert step(2, genguard_finetune("gpt2").model) == []  # it learned to stop: the step-1 loop is history
    assert find_repetition(recorder.history[0].trace)
