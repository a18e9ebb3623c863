"""Checking the server you deploy: the snapshot of the model you tested judges the server that serves it.

This is an ordinary snapshot test of the model that `fixtures/vllm_tiny_llama` holds (a tiny llama, the kind a vLLM
server loads). Run as it is, it checks transformers' decoding; run with a server's URL, every snapshot assertion
also teacher forces the stored paths through the server over HTTP (token ids in and out) and judges it by the same
rule, without a change to the test:

    pytest examples/test_served_model.py --genguard-server http://127.0.0.1:8000

`genguard check-server http://127.0.0.1:8000 examples/__snapshots__/test_served_model/` does the same from the
command line, without torch (exit 0 holds, 1 regression, 2 bad input, 3 stale). CI's server leg runs both against a
real vLLM (tests/serving/test_vllm_server.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_genguard import record, tiny_tokenizer

MODEL_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "vllm_tiny_llama"
PROMPTS = ["the quick brown fox", "a small model", "once upon a time", "numbers and letters"]


@pytest.fixture(scope="module")
def served():
    from transformers import AutoModelForCausalLM

    # The folder's tokenizer is genguard's shipped tiny one (saved beside the weights for the server to load).
    return AutoModelForCausalLM.from_pretrained(MODEL_DIR).eval(), tiny_tokenizer()


def test_the_model_you_serve_decodes_as_tested(served, genguard_snapshot):
    model, tokenizer = served
    assert record(model, tokenizer, PROMPTS, max_new_tokens=12, top_k=5) == genguard_snapshot
