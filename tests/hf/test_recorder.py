"""GenerationRecorder: records probe traces during a real Trainer run without changing the training it watches."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from transformers import Trainer, TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from pytest_genguard.core.compare import compare
from pytest_genguard.core.errors import TraceFormatError
from pytest_genguard.core.history import Checkpoint, RecorderHistory, history_from_json, history_to_json
from pytest_genguard.core.verdict import Verdict
from pytest_genguard.hf.environment import training_libraries
from pytest_genguard.hf.recipe import Collator, Recipe, examples_for
from pytest_genguard.hf.record import record
from pytest_genguard.hf.recorder import GenerationRecorder
from pytest_genguard.hf.run_state import preserved_rng, training_identity
from pytest_genguard.hf.tiny import probe_prompts, tiny_model, tiny_tokenizer
from pytest_genguard.hf.weights_hash import weights_hash

pytestmark = pytest.mark.usefixtures("one_thread")  # (tests/hf/conftest.py)

STEPS = 6
PROMPTS = probe_prompts()[:2]


def _train(tmp: Path, callbacks: list[TrainerCallback]) -> Trainer:
    """A user's plain Trainer run: tiny gpt2 with dropout on, batch 2 (so epochs reshuffle), logging every 2 steps."""
    tokenizer = tiny_tokenizer()
    model = tiny_model("gpt2")
    assert model.config.resid_pdrop > 0  # dropout draws from the torch RNG during training
    args = TrainingArguments(
        output_dir=str(tmp),
        max_steps=STEPS,
        per_device_train_batch_size=2,
        learning_rate=1e-2,
        logging_steps=2,
        seed=0,
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=examples_for(Recipe.of("gpt2", steps=1, learning_rate=1e-2, batch_size=2), tokenizer),
        data_collator=Collator(int(tokenizer.pad_token_id)),
        processing_class=tokenizer,
        callbacks=callbacks,
    )
    trainer.train()
    return trainer


class _LeakyRecorder(TrainerCallback):  # type: ignore[misc]
    """Negative control: samples the probes without saving the RNG state, as a naive callback would."""

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        tokenizer = kwargs["processing_class"]
        batch = tokenizer(PROMPTS, return_tensors="pt", padding=True)
        with torch.no_grad():
            kwargs["model"].generate(**batch, max_new_tokens=4, do_sample=True, pad_token_id=tokenizer.pad_token_id)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("recorder")
    plain = _train(tmp / "plain", [])
    recorder = GenerationRecorder(PROMPTS, every_n_steps=2, max_new_tokens=6, do_sample=True, seed=3)
    recorded = _train(tmp / "recorded", [recorder])
    leaky = _train(tmp / "leaky", [_LeakyRecorder()])
    return {"plain": plain, "recorded": recorded, "leaky": leaky, "recorder": recorder}


def test_weights_are_bitwise_identical_with_a_sampling_recorder_and_dropout(runs: dict[str, Any]) -> None:
    assert weights_hash(runs["recorded"].model) == weights_hash(runs["plain"].model)


def test_a_recorder_that_does_not_restore_the_rng_changes_the_weights(runs: dict[str, Any]) -> None:
    assert weights_hash(runs["leaky"].model) != weights_hash(runs["plain"].model)


def test_history_has_a_checkpoint_every_n_steps_with_its_own_logged_loss(runs: dict[str, Any]) -> None:
    history = runs["recorder"].history
    assert isinstance(history, RecorderHistory)
    assert [c.step for c in history] == [2, 4, 6]  # the end of training is not recorded twice
    assert [c.event for c in history] == ["step", "step", "step"]
    logged = {e["step"]: e["loss"] for e in runs["recorded"].state.log_history if "loss" in e}
    assert [c.loss for c in history] == [logged[2], logged[4], logged[6]]
    assert [c.epoch for c in history] == [0.5, 1.0, 1.5]
    for c in history:
        assert [p.prompt for p in c.trace] == PROMPTS
        assert c.trace.settings["mode"] == "sample"


def test_history_round_trips_through_its_json_form(runs: dict[str, Any]) -> None:
    history = runs["recorder"].history
    text = history.to_json()
    assert text == history_to_json(list(history))
    back = RecorderHistory.from_json(text)
    assert back == history
    assert isinstance(back, RecorderHistory)
    assert back.to_json() == text
    # Diff-friendly: each generated step of each checkpoint's trace is a line of its own.
    step_lines = [line for line in text.splitlines() if line.lstrip().startswith('{"id": ')]
    assert len(step_lines) == sum(len(p.steps) for c in history for p in c.trace)


def test_a_corrupt_history_is_reported_with_its_source_and_checkpoint(runs: dict[str, Any]) -> None:
    text = runs["recorder"].history.to_json()
    with pytest.raises(TraceFormatError, match=r"hist\.json: not valid JSON"):
        history_from_json(text[: len(text) // 2], source="hist.json")
    with pytest.raises(TraceFormatError, match=r"checkpoints\[0\]\.event: 'bogus'"):
        history_from_json(text.replace('"event": "step"', '"event": "bogus"', 1), source="hist.json")
    with pytest.raises(TraceFormatError, match="format 2 is not supported"):
        history_from_json(text.replace('"genguard_history": 1', '"genguard_history": 2'), source="hist.json")


# ------------------------------------------------------------------------------------ hooks called directly


@pytest.fixture(scope="module")
def hook_args(tmp_path_factory: pytest.TempPathFactory) -> TrainingArguments:
    return TrainingArguments(output_dir=str(tmp_path_factory.mktemp("hooks")), use_cpu=True, report_to="none")


def _state(step: int = 1, *, main: bool = True) -> TrainerState:
    state = TrainerState()
    state.global_step = step
    state.epoch = 0.25 * step
    state.is_world_process_zero = main
    state.log_history = [{"loss": 3.5, "step": 1}, {"eval_loss": 9.0, "step": 1}]
    return state


@pytest.fixture(scope="module")
def model() -> Any:
    return tiny_model("gpt2")


@pytest.mark.parametrize("source", ["constructor", "processing_class", "tokenizer"])
def test_the_tokenizer_comes_from_the_constructor_or_the_callback_kwargs(
    source: str, hook_args: TrainingArguments, model: Any
) -> None:
    tokenizer = tiny_tokenizer()
    recorder = GenerationRecorder(
        PROMPTS, every_n_steps=1, max_new_tokens=3, **({"tokenizer": tokenizer} if source == "constructor" else {})
    )
    kwargs = {} if source == "constructor" else {source: tokenizer}
    recorder.on_train_begin(hook_args, _state(0), TrainerControl(), model=model, **kwargs)
    recorder.on_step_end(hook_args, _state(1), TrainerControl(), model=model, **kwargs)
    assert len(recorder.history) == 1
    plain = record(model, tokenizer, PROMPTS, max_new_tokens=3)
    assert plain.model is not None
    identity = training_identity(model, tokenizer, hook_args)
    environment = {**plain.environment, **training_libraries()}  # a history names TRL and PEFT too
    assert recorder.history[0].trace == replace(
        plain, model=replace(plain.model, recipe=identity), environment=environment
    )
    assert recorder.history[0].loss == 3.5  # the latest training loss, not the eval loss


def test_a_history_is_identified_by_how_the_run_started_not_by_the_weights_it_reached(
    hook_args: TrainingArguments, model: Any
) -> None:
    # Training on another CPU reaches other weights: the checkpoints carry the run's identity (initial weights,
    # tokenizer, training arguments) as their recipe, so such histories are compared, not called stale.
    tokenizer = tiny_tokenizer()
    identity = training_identity(model, tokenizer, hook_args)
    assert identity == training_identity(model, tiny_tokenizer(), hook_args)
    faster = replace(hook_args, learning_rate=hook_args.learning_rate * 2)
    assert training_identity(model, tokenizer, faster) != identity
    other = tiny_model("gpt2", seed=1)
    assert training_identity(other, tokenizer, hook_args) != identity
    trace = record(model, tokenizer, PROMPTS, max_new_tokens=3)
    assert trace.model is not None
    here = replace(trace, model=replace(trace.model, recipe=identity))
    elsewhere = replace(here, model=replace(here.model, weights_hash="f" * 64))  # type: ignore[arg-type]
    assert compare(here, elsewhere).verdict is Verdict.IDENTICAL
    changed = replace(here, model=replace(here.model, recipe=training_identity(model, tokenizer, faster)))  # type: ignore[arg-type]
    assert compare(here, changed).verdict is Verdict.STALE


def test_the_constructor_tokenizer_wins_over_processing_class_which_wins_over_tokenizer() -> None:
    a, b, c = tiny_tokenizer(), tiny_tokenizer(), tiny_tokenizer()
    assert GenerationRecorder("x", tokenizer=a).resolve_tokenizer({"processing_class": b, "tokenizer": c}) is a
    assert GenerationRecorder("x").resolve_tokenizer({"processing_class": b, "tokenizer": c}) is b
    assert GenerationRecorder("x").resolve_tokenizer({"processing_class": None, "tokenizer": c}) is c


def test_a_recorder_without_any_tokenizer_fails_before_training_says_how_to_fix(
    hook_args: TrainingArguments, model: Any
) -> None:
    recorder = GenerationRecorder(PROMPTS)
    with pytest.raises(ValueError, match=r"GenerationRecorder\(prompts, tokenizer=tokenizer\).*processing_class"):
        recorder.on_train_begin(hook_args, _state(0), TrainerControl(), model=model, processing_class=None)


def test_a_sampling_recorder_without_a_seed_fails_before_training_naming_seed(
    hook_args: TrainingArguments, model: Any
) -> None:
    # Its history could never be checked: each run would sample other tokens (the error record() gives, at once).
    recorder = GenerationRecorder(PROMPTS, tokenizer=tiny_tokenizer(), do_sample=True)
    with pytest.raises(ValueError, match=r"^GenerationRecorder\(\): do_sample=True samples, but no seed= was given"):
        recorder.on_train_begin(hook_args, _state(0), TrainerControl(), model=model)
    seeded = GenerationRecorder(PROMPTS, tokenizer=tiny_tokenizer(), do_sample=True, seed=0)
    seeded.on_train_begin(hook_args, _state(0), TrainerControl(), model=model)


def test_only_the_main_process_records(hook_args: TrainingArguments, model: Any) -> None:
    recorder = GenerationRecorder(PROMPTS, every_n_steps=1, max_new_tokens=2, tokenizer=tiny_tokenizer())
    recorder.on_step_end(hook_args, _state(1, main=False), TrainerControl(), model=model)
    recorder.on_evaluate(hook_args, _state(1, main=False), TrainerControl(), model=model)
    recorder.on_train_end(hook_args, _state(1, main=False), TrainerControl(), model=model)
    assert recorder.history == []
    recorder.on_step_end(hook_args, _state(1, main=True), TrainerControl(), model=model)
    assert len(recorder.history) == 1


def test_recording_in_train_mode_uses_eval_mode_and_restores_train_mode(hook_args: TrainingArguments) -> None:
    model = tiny_model("gpt2")
    tokenizer = tiny_tokenizer()
    expected = record(model, tokenizer, PROMPTS, max_new_tokens=8)  # eval mode: dropout off
    model.train()
    recorder = GenerationRecorder(PROMPTS, every_n_steps=1, max_new_tokens=8, tokenizer=tokenizer)
    recorder.on_step_end(hook_args, _state(1), TrainerControl(), model=model)
    assert model.training
    assert recorder.history[0].trace == replace(expected, environment={**expected.environment, **training_libraries()})
    with torch.no_grad():  # negative control: in train mode dropout changes the logits
        ids = tokenizer(PROMPTS[0], return_tensors="pt")["input_ids"]
        assert not torch.equal(model(ids).logits, model(ids).logits)


def test_recording_does_not_mutate_the_models_generation_config(hook_args: TrainingArguments, model: Any) -> None:
    before = model.generation_config.to_dict()
    settings = {"do_sample": True, "temperature": 0.7, "top_p": 0.9, "repetition_penalty": 1.3}
    recorder = GenerationRecorder(
        PROMPTS, every_n_steps=1, max_new_tokens=3, tokenizer=tiny_tokenizer(), seed=0, **settings
    )
    recorder.on_step_end(hook_args, _state(1), TrainerControl(), model=model)
    assert recorder.history[0].trace.settings["temperature"] == 0.7
    assert model.generation_config.to_dict() == before
    changed = model.generation_config.__class__.from_dict(before)
    changed.update(**settings)  # negative control: applying the settings is visible in to_dict()
    assert changed.to_dict() != before


def test_evaluate_and_train_end_record_unless_turned_off_or_already_recorded(
    hook_args: TrainingArguments, model: Any
) -> None:
    tokenizer = tiny_tokenizer()
    recorder = GenerationRecorder(PROMPTS, every_n_steps=2, max_new_tokens=2, tokenizer=tokenizer)
    recorder.on_evaluate(hook_args, _state(1), TrainerControl(), model=model)
    recorder.on_step_end(hook_args, _state(1), TrainerControl(), model=model)  # 1 % 2: not a recording step
    recorder.on_train_end(hook_args, _state(3), TrainerControl(), model=model)
    recorder.on_train_end(hook_args, _state(3), TrainerControl(), model=model)  # step 3 already recorded
    assert [(c.step, c.event) for c in recorder.history] == [(1, "evaluate"), (3, "train_end")]
    quiet = GenerationRecorder(PROMPTS, on_evaluate=False, on_train_end=False, tokenizer=tokenizer)
    quiet.on_evaluate(hook_args, _state(1), TrainerControl(), model=model)
    quiet.on_train_end(hook_args, _state(3), TrainerControl(), model=model)
    assert quiet.history == []


def test_a_later_log_gives_the_checkpoint_of_its_step_that_steps_loss(hook_args: TrainingArguments, model: Any) -> None:
    recorder = GenerationRecorder(PROMPTS, every_n_steps=1, max_new_tokens=2, tokenizer=tiny_tokenizer())
    recorder.on_step_end(hook_args, _state(2), TrainerControl(), model=model)
    assert recorder.history[0].loss == 3.5
    recorder.on_log(hook_args, _state(3), TrainerControl(), logs={"loss": 1.0})  # another step: no change
    recorder.on_log(hook_args, _state(2), TrainerControl(), logs={"loss": 2.25})
    assert isinstance(recorder.history[0], Checkpoint)
    assert recorder.history[0].loss == 2.25


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"prompts": []}, r"GenerationRecorder\(\): prompts is empty"),
        ({"prompts": ["a", 7]}, r"GenerationRecorder\(\): prompt 1 is int 7; a prompt is a string, a list of token"),
        (
            {"prompts": ["a"], "every_n_steps": 0},
            r"GenerationRecorder\(\): every_n_steps must be an integer >= 1, got 0",
        ),
        ({"prompts": ["a"], "max_new_tokens": 0}, r"max_new_tokens must be an integer >= 1, got 0\."),
        ({"prompts": ["a"], "max_new_tokens": 2.5}, r"max_new_tokens must be an integer >= 1, got 2\.5"),
        ({"prompts": ["a"], "top_k": 0}, r"top_k must be an integer >= 1, got 0\."),
        ({"prompts": ["a"], "top_k": True}, r"top_k must be an integer >= 1, got True\."),
    ],
)
def test_bad_recorder_arguments_are_named(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        GenerationRecorder(**kwargs)


def test_preserved_rng_restores_python_numpy_and_torch_streams() -> None:
    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)
    with preserved_rng():
        inside = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    after = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    assert after == inside  # the same draws again: every stream was rewound
    # Negative control: without it the streams move on.
    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)
    first = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    second = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    assert all(x != y for x, y in zip(first, second, strict=True))
