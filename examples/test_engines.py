"""Checking your serving engine: the snapshot of the model you tested judges the engine you serve it with.

The pinned fine-tuned GPT-2 is saved with `save_pretrained`, converted for the engine (cached by its weights), and
its snapshot's paths are teacher forced through the engine: same tokens, every logprob within the float32 rule, or the
test fails at the first step that moved, with ``recorded on transformers, now ctranslate2 ...`` on its second line.

pip install "pytest-genguard[ctranslate2]"   # or [onnxruntime]; without it these tests are skipped and say so
"""

from __future__ import annotations

import pytest

from pytest_genguard import record

PROMPTS = ["the quick", "once upon a", "the train", "she reads"]


@pytest.fixture(scope="module")
def tuned(genguard_finetune):
    return genguard_finetune("gpt2")  # the pinned weights of examples/__genguard_pins__


@pytest.fixture(scope="module")
def saved(tuned, tmp_path_factory):
    # What you would ship to the engine's converter: a save_pretrained folder with its tokenizer.
    folder = tmp_path_factory.mktemp("tuned-gpt2")
    tuned.model.save_pretrained(folder)
    tuned.tokenizer.save_pretrained(folder)
    return folder


@pytest.mark.parametrize("engine", ["ctranslate2", "onnxruntime"])
def test_serving_engine_decodes_like_the_tested_model(engine, tuned, saved, genguard_engine, genguard_snapshot):
    served_by = genguard_engine(engine)  # skipped, naming the install command, when the engine is not installed
    tested = record(tuned.model, tuned.tokenizer, PROMPTS, max_new_tokens=24, top_k=5)
    assert tested == genguard_snapshot(name="transformers")  # what transformers generates (the tested model)
    assert served_by.record(saved, reference=tested) == genguard_snapshot(name="transformers")
