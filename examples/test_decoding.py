"""Decoding regression tests as a user writes them: snapshot what a fine-tuned model generates, check invariants.

pytest examples/                    # check against the committed snapshots
pytest examples/ --snapshot-update  # re-record them after an intended change
pytest examples/ --genguard-gpu     # the same on CUDA, plus the CUDA-vs-CPU test below
"""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers import GenerationConfig

from pytest_genguard import GenerationTrace, assert_deterministic, assert_no_repetition, compare, record

PROMPTS = ["the quick", "once upon a", "the train", "she reads"]


@pytest.fixture(scope="module")
def tuned(genguard_finetune):
    # A tiny GPT-2 fine-tuned offline on the shipped sentences, pinned: `pytest --snapshot-update` trained it once and
    # wrote its weights to examples/__genguard_pins__/, so every machine decodes the same weights.
    return genguard_finetune("gpt2")


def test_greedy_path(tuned, genguard_snapshot):
    trace = record(tuned.model, tuned.tokenizer, PROMPTS, max_new_tokens=24, top_k=5)
    assert_no_repetition(trace)
    assert trace == genguard_snapshot


def test_sampled_path_with_a_seed(tuned, genguard_snapshot):
    # Say every sampling setting: transformers 4.5x samples with top_k=50 unless told, 5.x with no top-k at all.
    # (record()'s own top_k is how many alternatives it records, so a sampling top-k goes in a GenerationConfig.)
    sampling = GenerationConfig(do_sample=True, temperature=1.5, top_k=50)
    trace = record(
        tuned.model, tuned.tokenizer, PROMPTS, max_new_tokens=24, top_k=5, seed=0, generation_config=sampling
    )
    assert trace == genguard_snapshot


def test_greedy_decoding_is_deterministic(tuned):
    assert_deterministic(tuned.model, tuned.tokenizer, PROMPTS, runs=3, max_new_tokens=24)


@pytest.mark.genguard_gpu
def test_cuda_decodes_like_the_cpu_snapshot(tuned, genguard_device):
    # Runs only with --genguard-gpu: the model is on CUDA; the snapshot of test_greedy_path was recorded on CPU.
    assert genguard_device.type == "cuda"
    snapshot = Path(__file__).parent / "__snapshots__" / "test_decoding" / "test_greedy_path.genguard"
    expected = GenerationTrace.from_json(snapshot.read_text(encoding="utf-8"), source=str(snapshot))
    actual = record(tuned.model, tuned.tokenizer, PROMPTS, max_new_tokens=24, top_k=5)
    comparison = compare(expected, actual)  # the tolerant rule: float32 tolerances, near ties tolerated
    assert comparison, str(comparison)
