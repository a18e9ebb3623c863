"""GenerationRecorder(eval_examples=N): evaluate() and predict() record the first N examples of the data they ran on,
read from the callback kwargs' eval_dataloader, without changing the training or the evaluation they watch."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from recorder_support import IterableExamples, decoder_examples, seq2seq_examples, trainer
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from pytest_genguard.core.history import RecorderHistory
from pytest_genguard.hf.recorder import GenerationRecorder
from pytest_genguard.hf.run_state import eval_rows
from pytest_genguard.hf.tiny import probe_prompts, tiny_model, tiny_tokenizer
from pytest_genguard.hf.weights_hash import weights_hash

pytestmark = pytest.mark.usefixtures("one_thread")  # (tests/hf/conftest.py)

PROBES = probe_prompts()[:2]


def _ids(checkpoint: Any) -> list[list[int]]:
    return [list(p.prompt_ids) for p in checkpoint.trace]


def test_seq2seq_evaluate_and_predict_record_the_first_examples_encoder_inputs(tmp_path: Path) -> None:
    tokenizer = tiny_tokenizer()
    data = seq2seq_examples(tokenizer)
    assert len({len(d["input_ids"]) for d in data[:3]}) == 2  # examples of two lengths: padding is removed
    recorder = GenerationRecorder(eval_examples=3, max_new_tokens=6)
    run = trainer(tmp_path, "t5", callbacks=[recorder], tokenizer=tokenizer)
    run.evaluate()
    run.predict(data[4:])  # other data: predict() records what it predicts on
    assert [c.event for c in recorder.history] == ["evaluate", "predict"]
    assert _ids(recorder.history[0]) == [d["input_ids"] for d in data[:3]]  # batches of 2: crosses a batch
    assert _ids(recorder.history[1]) == [d["input_ids"] for d in data[4:7]]
    assert [p.prompt for p in recorder.history[0].trace] == [tokenizer.decode(d["input_ids"]) for d in data[:3]]
    for c in recorder.history:
        assert c.step == 0 and c.trace.model.model_type == "t5"
        assert all(1 <= len(p.steps) <= 6 for p in c.trace)
    assert RecorderHistory.from_json(recorder.history.to_json()) == recorder.history  # "predict" is a known event


@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_decoder_only_evaluate_and_predict_record_a_prefix_of_each_example(padding_side: str, tmp_path: Path) -> None:
    tokenizer = tiny_tokenizer()
    tokenizer.padding_side = padding_side  # the collator pads on this side; the recorder removes either
    data = decoder_examples(tokenizer)
    recorder = GenerationRecorder(PROBES, eval_examples=5, eval_prompt_tokens=9, max_new_tokens=4)
    run = trainer(tmp_path, "gpt2", callbacks=[recorder], tokenizer=tokenizer)
    run.evaluate()
    run.predict(data[3:])
    first = [d["input_ids"][:9] for d in data[:5]]
    assert any(len(d["input_ids"]) < 9 for d in data[:5])  # a short example is recorded whole
    assert [c.event for c in recorder.history] == ["evaluate", "predict"]
    # Probe prompts first, then the examples.
    assert [p.prompt for p in recorder.history[0].trace][:2] == PROBES
    assert _ids(recorder.history[0])[:2] == [tokenizer(p)["input_ids"] for p in PROBES]
    assert _ids(recorder.history[0])[2:] == first
    assert _ids(recorder.history[1])[2:] == [d["input_ids"][:9] for d in data[3:8]]


def test_more_eval_examples_than_the_dataset_has_records_all_of_them(tmp_path: Path) -> None:
    tokenizer = tiny_tokenizer()
    data = decoder_examples(tokenizer)[:3]
    recorder = GenerationRecorder(eval_examples=50, max_new_tokens=2)
    run = trainer(tmp_path, "gpt2", callbacks=[recorder], tokenizer=tokenizer, eval_dataset=data)
    run.evaluate()
    assert _ids(recorder.history[0]) == [d["input_ids"][:8] for d in data]


def test_an_iterable_eval_dataset_is_recorded_from_its_stream(tmp_path: Path) -> None:
    tokenizer = tiny_tokenizer()
    data = decoder_examples(tokenizer)
    recorder = GenerationRecorder(eval_examples=3, max_new_tokens=2)
    run = trainer(tmp_path, "gpt2", callbacks=[recorder], tokenizer=tokenizer, eval_dataset=IterableExamples(data))
    metrics = run.evaluate()
    run.evaluate()  # the stream is read again from its start, and evaluation is unaffected by the recording
    assert run.evaluate()["eval_loss"] == metrics["eval_loss"]
    assert [_ids(c) for c in recorder.history] == [[d["input_ids"][:8] for d in data[:3]]] * 3


def test_without_eval_examples_predict_records_nothing_and_evaluate_only_the_probes(tmp_path: Path) -> None:
    recorder = GenerationRecorder(PROBES, max_new_tokens=2)
    run = trainer(tmp_path, "gpt2", callbacks=[recorder])
    run.evaluate()
    run.predict(decoder_examples(tiny_tokenizer()))
    assert [(c.event, [p.prompt for p in c.trace]) for c in recorder.history] == [("evaluate", PROBES)]


# ---------------------------------------------------------------------------------------------------- RNG


class _NaiveEvalReader(TrainerCallback):  # type: ignore[misc]
    """Negative control: reads the evaluation batches the obvious way, without saving the RNG state."""

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        for _ in kwargs["eval_dataloader"]:
            pass


def _run(tmp: Path, callbacks: list[Any]) -> Any:
    """Training with dropout on (it draws from the torch RNG), evaluated every 2 steps."""
    model = tiny_model("gpt2")
    assert model.config.resid_pdrop > 0
    run = trainer(tmp, "gpt2", model=model, callbacks=callbacks, eval_strategy="steps", eval_steps=2)
    run.train()
    return run


@pytest.fixture(scope="module")
def rng_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("rng")
    recorder = GenerationRecorder(PROBES, eval_examples=3, every_n_steps=3, max_new_tokens=6, do_sample=True, seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {
            "plain": _run(tmp / "plain", []),
            "recorded": _run(tmp / "recorded", [recorder]),
            "naive": _run(tmp / "naive", [_NaiveEvalReader()]),
            "recorder": recorder,
        }


def _losses(run: Any) -> list[tuple[int, float]]:
    return [(e["step"], e[k]) for e in run.state.log_history for k in ("loss", "eval_loss") if k in e]


def test_weights_and_losses_are_bitwise_identical_with_eval_recording_on(rng_runs: dict[str, Any]) -> None:
    events = [(c.step, c.event) for c in rng_runs["recorder"].history]
    assert events == [(2, "evaluate"), (3, "step"), (4, "evaluate"), (6, "step"), (6, "evaluate")]
    assert weights_hash(rng_runs["recorded"].model) == weights_hash(rng_runs["plain"].model)
    assert _losses(rng_runs["recorded"]) == _losses(rng_runs["plain"])


def test_reading_the_eval_dataloader_without_restoring_the_rng_changes_the_weights(rng_runs: dict[str, Any]) -> None:
    assert weights_hash(rng_runs["naive"].model) != weights_hash(rng_runs["plain"].model)


# ---------------------------------------------------------------------------------------------------- bad input


def _hook_args(tmp: Path) -> TrainingArguments:
    return TrainingArguments(output_dir=str(tmp), use_cpu=True, report_to="none")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, r"nothing to record.*eval_examples=N"),
        ({"prompts": None, "eval_examples": 0}, r"nothing to record"),
        ({"eval_examples": -1}, r"GenerationRecorder\(\): eval_examples must be an integer >= 0, got -1"),
        ({"eval_examples": True}, r"eval_examples must be an integer >= 0, got True"),
        ({"eval_examples": 2, "eval_prompt_tokens": 0}, r"eval_prompt_tokens must be an integer >= 1, got 0"),
        ({"eval_examples": 2, "every_n_steps": 5}, r"every_n_steps=5\).*no.*pass prompts"),
        ({"prompts": "x", "on_degenerate": "raise"}, r"on_degenerate='raise'\): must be None, 'warn' or 'stop'"),
    ],
)
def test_bad_eval_recording_arguments_are_named(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        GenerationRecorder(**kwargs)


def test_an_evaluate_hook_without_eval_dataloader_says_what_is_missing(tmp_path: Path) -> None:
    recorder = GenerationRecorder(eval_examples=2, tokenizer=tiny_tokenizer())
    state = TrainerState()
    with pytest.raises(ValueError, match=r"'evaluate' callback got no eval_dataloader"):
        recorder.on_evaluate(_hook_args(tmp_path), state, TrainerControl(), model=tiny_model("gpt2"))


def test_batches_without_input_ids_are_reported_with_their_keys() -> None:
    loader = [{"pixel_values": torch.zeros(2, 3)}]
    with pytest.raises(ValueError, match=r"no 'input_ids' \(found \['pixel_values'\]\)"):
        eval_rows(loader, 2, encoder_decoder=False, prompt_tokens=8, pad_token_id=0)


def test_without_an_attention_mask_padding_is_removed_by_the_pad_id() -> None:
    loader = [{"input_ids": torch.tensor([[5, 6, 7, 0, 0], [0, 0, 8, 9, 1]])}]
    assert eval_rows(loader, 5, encoder_decoder=True, prompt_tokens=1, pad_token_id=0) == [[5, 6, 7], [8, 9, 1]]
    assert eval_rows(loader, 1, encoder_decoder=False, prompt_tokens=2, pad_token_id=0) == [[5, 6]]


def test_an_example_that_is_only_padding_is_named() -> None:
    loader = [{"input_ids": torch.tensor([[5, 6], [0, 0]]), "attention_mask": torch.tensor([[1, 1], [0, 0]])}]
    with pytest.raises(ValueError, match=r"evaluation example 1 has no token once padding is removed"):
        eval_rows(loader, 2, encoder_decoder=False, prompt_tokens=8, pad_token_id=0)


def test_the_recording_leaves_no_evaluation_loader_registered_with_accelerate(tmp_path: Path) -> None:
    """Reading accelerate's wrapper and stopping early would leave it registered as the active dataloader of the
    (process-wide) GradientState that gradient accumulation consults; the recorder reads the plain DataLoader."""

    class EarlyStop(TrainerCallback):  # type: ignore[misc]
        def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.loader = kwargs["eval_dataloader"]
            next(iter(self.loader))

    recorder = GenerationRecorder(eval_examples=1, max_new_tokens=2)
    run = trainer(tmp_path / "recorded", "gpt2", callbacks=[recorder])
    registered = list(run.accelerator.gradient_state.dataloader_references)
    run.evaluate()
    assert len(recorder.history) == 1
    assert run.accelerator.gradient_state.dataloader_references == registered
    early = EarlyStop()
    naive = trainer(tmp_path / "naive", "gpt2", callbacks=[early])  # negative control
    naive.evaluate()
    try:
        assert naive.accelerator.gradient_state.active_dataloader is early.loader
    finally:
        early.loader.end()  # unregister: the GradientState outlives this test


def test_only_the_main_process_reads_the_evaluation_data(tmp_path: Path) -> None:
    class Untouchable:
        def __iter__(self) -> Iterator[Any]:
            raise AssertionError("a non-main process read the evaluation data")

    recorder = GenerationRecorder(eval_examples=2, tokenizer=tiny_tokenizer())
    state = TrainerState()
    state.is_world_process_zero = False
    hooks = {"model": tiny_model("gpt2"), "eval_dataloader": Untouchable(), "metrics": {}}
    recorder.on_evaluate(_hook_args(tmp_path), state, TrainerControl(), **hooks)
    recorder.on_predict(_hook_args(tmp_path), state, TrainerControl(), **hooks)
    assert recorder.history == []
