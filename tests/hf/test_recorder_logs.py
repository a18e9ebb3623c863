"""Each recording adds figures to the Trainer's own logs: trainer_state.json, the metrics evaluate()/predict() return,
and, with `attach(trainer)`, every report_to integration (checked with TensorBoard)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest
from recorder_support import decoder_examples, trainer

from pytest_genguard.core.repetition import find_repetition
from pytest_genguard.hf.recorder import GenerationRecorder
from pytest_genguard.hf.run_state import recording_figures
from pytest_genguard.hf.tiny import probe_prompts, tiny_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")  # (tests/hf/conftest.py)

PROBES = probe_prompts()[:2]
NAMES = {"min_margin", "eos_rate", "repetition", "new_tokens"}


def _figure_entries(history: list[dict[str, Any]], prefix: str = "") -> dict[int, dict[str, float]]:
    out = {}
    for entry in history:
        key = f"{prefix}genguard/"
        found = {k.removeprefix(key): v for k, v in entry.items() if k.startswith(key)}
        if found:
            out[entry["step"]] = found
    return out


def test_figures_of_every_recording_land_in_trainer_state_json(tmp_path: Path) -> None:
    recorder = GenerationRecorder(PROBES, eval_examples=3, every_n_steps=2, max_new_tokens=8)
    run = trainer(tmp_path, "gpt2", callbacks=[recorder], eval_strategy="steps", eval_steps=3)
    run.train()
    run.save_state()
    saved = json.loads((tmp_path / "trainer_state.json").read_text(encoding="utf-8"))["log_history"]
    steps = {c.step: c for c in recorder.history if c.event == "step"}
    evaluations = {c.step: c for c in recorder.history if c.event == "evaluate"}
    assert sorted(steps) == [2, 4, 6] and sorted(evaluations) == [3, 6]
    assert _figure_entries(saved) == {s: _figures(c) for s, c in steps.items()}
    assert _figure_entries(saved, "eval_") == {s: _figures(c) for s, c in evaluations.items()}
    assert set(_figure_entries(saved)[2]) == NAMES
    # The Trainer's own log entries are all still there, the losses the checkpoints carry among them.
    assert [e["step"] for e in saved if "loss" in e] == [2, 4, 6]
    assert [c.loss for c in steps.values()] == [e["loss"] for e in saved if "loss" in e]


def _looping(checkpoint: Any) -> int:
    return len(find_repetition(checkpoint.trace).prompts)


def _figures(checkpoint: Any) -> dict[str, float]:
    return recording_figures(checkpoint.trace, _looping(checkpoint))


def test_figures_are_what_the_trace_says() -> None:
    from pytest_genguard.hf.record import record
    from pytest_genguard.hf.tiny import tiny_model

    trace = record(tiny_model("gpt2"), tiny_tokenizer(), PROBES, max_new_tokens=6)
    figures = recording_figures(trace, looping_prompts=1)
    assert figures["min_margin"] == min(s.margin for p in trace for s in p.steps)
    assert figures["eos_rate"] == sum(p.finish_reason == "eos" for p in trace) / 2
    assert figures["repetition"] == 0.5
    assert figures["new_tokens"] == sum(len(p.steps) for p in trace) / 2
    one_candidate = record(tiny_model("gpt2"), tiny_tokenizer(), PROBES, max_new_tokens=2, top_k=1)
    assert "min_margin" not in recording_figures(one_candidate, 0)  # no runner-up: no margin (not inf)


def test_evaluate_and_predict_return_their_figures_with_the_trainers_prefixes(tmp_path: Path) -> None:
    data = decoder_examples(tiny_tokenizer())
    recorder = GenerationRecorder(eval_examples=2, max_new_tokens=4)
    run = trainer(tmp_path, "gpt2", callbacks=[recorder], eval_dataset={"a": data[:3], "b": data[3:]})
    metrics = run.evaluate()
    predicted = run.predict(data, metric_key_prefix="final")
    assert {k for k in metrics if "genguard" in k} == {f"eval_{d}_genguard/{n}" for d in "ab" for n in NAMES}
    assert {k for k in predicted.metrics if "genguard" in k} == {f"final_genguard/{n}" for n in NAMES}
    first = recorder.history[0]
    assert _figure_entries(run.state.log_history, "eval_a_")[0] == _figures(first)
    assert [c.event for c in recorder.history] == ["evaluate", "evaluate", "predict"]


# ---------------------------------------------------------------------------------------------------- TensorBoard


def _tensorboard_tags(folder: Path) -> dict[str, list[int]]:
    """Scalar tag -> steps, over every TensorBoard event file under `folder`."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tags: dict[str, list[int]] = {}
    for events in sorted(folder.rglob("events.out.tfevents.*")):
        accumulator = EventAccumulator(str(events))
        accumulator.Reload()
        for tag in accumulator.Tags()["scalars"]:
            tags.setdefault(tag, []).extend(e.step for e in accumulator.Scalars(tag))
    return tags


def _tensorboard_run(tmp: Path, attach: bool) -> tuple[Any, list[str]]:
    recorder = GenerationRecorder(PROBES, eval_examples=2, every_n_steps=2, max_new_tokens=4)
    run = trainer(
        tmp,
        "gpt2",
        callbacks=[] if attach else [recorder],
        report_to=["tensorboard"],
        eval_strategy="steps",
        eval_steps=3,
    )
    if attach:
        assert recorder.attach(run) is recorder
        recorder.attach(run)  # attaching twice adds the callback once
        assert sum(cb is recorder for cb in run.callback_handler.callbacks) == 1
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run.train()
    return run, [str(w.message) for w in caught if "GenerationRecorder" in str(w.message)]


def test_attached_the_figures_reach_tensorboard_at_their_steps(tmp_path: Path) -> None:
    run, messages = _tensorboard_run(tmp_path, attach=True)
    assert messages == []
    tags = _tensorboard_tags(tmp_path)
    assert tags["train/genguard/eos_rate"] == [2, 4, 6]
    assert tags["eval/genguard/min_margin"] == [3, 6]
    assert tags["train/loss"] == [2, 4, 6]  # the Trainer's own logging is untouched
    assert [e["step"] for e in run.state.log_history if "genguard/repetition" in e] == [2, 4, 6]


def test_not_attached_integrations_miss_the_figures_and_a_warning_says_to_attach(tmp_path: Path) -> None:
    """Negative control: integrations run before user callbacks, so without the Trainer the figures stay in
    trainer_state.json (the log history) only."""
    run, messages = _tensorboard_run(tmp_path, attach=False)
    assert len(messages) == 1
    assert "not to report_to ['tensorboard']" in messages[0] and ".attach(trainer)" in messages[0]
    tags = _tensorboard_tags(tmp_path)
    assert "train/loss" in tags and not any("genguard" in t for t in tags)
    assert [e["step"] for e in run.state.log_history if "genguard/repetition" in e] == [2, 4, 6]
