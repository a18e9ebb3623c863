"""A recorder history's environment carries the installed TRL and PEFT releases (read from their metadata, never
imported), so an upgrade that changes training is named where the history changed; a plain record() trace does not
(they do not decode)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import subprocess
import sys
from typing import Any

import pytest
from transformers import TrainerControl, TrainerState, TrainingArguments

from pytest_genguard.core.environments import LIBRARY_FIELDS
from pytest_genguard.hf import environment as environment_module
from pytest_genguard.hf.environment import training_libraries
from pytest_genguard.hf.record import record
from pytest_genguard.hf.recorder import GenerationRecorder
from pytest_genguard.hf.tiny import probe_prompts, tiny_model, tiny_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")  # (tests/hf/conftest.py)


def _installed() -> dict[str, str]:
    return {
        name: importlib.metadata.version(name) for name in LIBRARY_FIELDS if importlib.util.find_spec(name) is not None
    }


def _state(step: int) -> TrainerState:
    state = TrainerState()
    state.global_step = step
    state.is_world_process_zero = True
    return state


def test_a_recorder_history_names_the_installed_trl_and_peft_releases(tmp_path: Any) -> None:
    model, tokenizer = tiny_model("gpt2"), tiny_tokenizer()
    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none")
    recorder = GenerationRecorder(probe_prompts()[:1], tokenizer=tokenizer, every_n_steps=1, max_new_tokens=2)
    recorder.on_train_begin(args, _state(0), TrainerControl(), model=model)
    recorder.on_step_end(args, _state(1), TrainerControl(), model=model)
    environment = recorder.history[0].trace.environment
    assert {k: environment[k] for k in LIBRARY_FIELDS if k in environment} == _installed()
    # a plain recording does not: TRL and PEFT train, they do not decode (a PEFT model has its adapters fingerprinted)
    plain = record(model, tokenizer, probe_prompts()[:1], max_new_tokens=2)
    assert not set(LIBRARY_FIELDS) & set(plain.environment)


def test_a_library_that_is_not_importable_is_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        environment_module.importlib.util, "find_spec", lambda name, *a: None if name == "trl" else real(name, *a)
    )
    assert "trl" not in training_libraries()


def test_the_releases_are_read_without_importing_the_libraries() -> None:
    code = (
        "import sys; from pytest_genguard.hf.environment import training_libraries; fields = training_libraries(); "
        "print(sorted(fields), [m for m in ('trl', 'peft', 'torch') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == f"{sorted(_installed())} []"
