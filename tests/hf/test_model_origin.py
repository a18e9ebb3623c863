"""The model fingerprint keeps where the model came from: the hub id as given (a local folder by its name only, the
same on every machine) and the hub commit transformers resolved, omitted when unknown (a tiny model built from a
config writes the bytes it wrote before)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from transformers import AutoModelForCausalLM

from pytest_genguard.core.compare import compare
from pytest_genguard.hf.fingerprint import model_fingerprint
from pytest_genguard.hf.record import record
from pytest_genguard.hf.tiny import tiny_model, tiny_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")  # (tests/hf/conftest.py)

REVISION = "0123456789abcdef0123456789abcdef01234567"


def test_a_model_built_from_a_config_has_no_origin_and_its_trace_keeps_its_bytes() -> None:
    model = tiny_model("gpt2")
    fingerprint = model_fingerprint(model)
    assert (fingerprint.name_or_path, fingerprint.revision) == (None, None)
    text = record(model, tiny_tokenizer(), ["the quick"], max_new_tokens=2).to_json()
    assert '"name_or_path"' not in text and '"revision"' not in text


def test_a_model_loaded_from_a_folder_is_named_by_the_folder_alone(tmp_path: Path) -> None:
    folder = tmp_path / "my-finetune"
    tiny_model("gpt2").save_pretrained(folder)
    loaded = AutoModelForCausalLM.from_pretrained(folder)
    assert loaded.config._name_or_path == str(folder)  # transformers keeps the path as given
    fingerprint = model_fingerprint(loaded)
    assert fingerprint.name_or_path == "my-finetune" and fingerprint.revision is None
    assert fingerprint == model_fingerprint(tiny_model("gpt2"))  # the same weights: the same model


def _from_hub(model: Any, name: str, revision: str) -> Any:
    """What from_pretrained("org/model") leaves in the config (no network here: set as transformers sets it)."""
    model.config._name_or_path = name
    model.config._commit_hash = revision
    return model


def test_a_hub_model_keeps_its_id_as_given_and_its_commit() -> None:
    fingerprint = model_fingerprint(_from_hub(tiny_model("gpt2"), "org/tiny-gpt2", REVISION))
    assert (fingerprint.name_or_path, fingerprint.revision) == ("org/tiny-gpt2", REVISION)


def test_a_new_revision_with_new_weights_is_stale_naming_both_commits() -> None:
    tokenizer = tiny_tokenizer()
    old = record(_from_hub(tiny_model("gpt2", seed=0), "org/tiny-gpt2", REVISION), tokenizer, ["hi"], max_new_tokens=2)
    new_model = _from_hub(tiny_model("gpt2", seed=1), "org/tiny-gpt2", "fedcba9876543210" + "0" * 24)
    new = record(new_model, tokenizer, ["hi"], max_new_tokens=2)
    (reason,) = compare(old, new).stale_reasons
    assert reason.startswith("model changed: weights ")
    assert reason.endswith("(revision 0123456789ab -> fedcba987654 of org/tiny-gpt2)")
