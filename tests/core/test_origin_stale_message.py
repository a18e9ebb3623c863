"""Where a model came from (its hub id or folder name, and the hub commit) is kept beside its fingerprint: a stale
message says which revision changed, while the origin is not the model's identity and a trace without it keeps its
exact bytes."""

from __future__ import annotations

import dataclasses

import trace_builder

from pytest_genguard.core.compare import compare
from pytest_genguard.core.trace import GenerationTrace, ModelFingerprint
from pytest_genguard.core.verdict import Verdict

OLD_REVISION, NEW_REVISION = "abc123" + "0" * 34, "def456" + "1" * 34
BASE = ModelFingerprint("llama", "c" * 64, "1a2b3c4d5e6f" + "0" * 52, 1000, "float32")
NEW_WEIGHTS = "9f8e7d6c5b4a" + "1" * 52


def _trace(model: ModelFingerprint) -> GenerationTrace:
    return trace_builder.trace([trace_builder.step([(3, -0.5), (9, -2.0)], text="t3")], model=model)


def _origin(name: str | None, revision: str | None, weights: str = BASE.weights_hash) -> ModelFingerprint:
    return dataclasses.replace(BASE, name_or_path=name, revision=revision, weights_hash=weights)


def test_a_stale_message_says_which_revision_of_the_hub_model_changed() -> None:
    old = _trace(_origin("org/model", OLD_REVISION))
    new = _trace(_origin("org/model", NEW_REVISION, NEW_WEIGHTS))
    assert compare(old, new).stale_reasons == (
        "model changed: weights 1a2b3c4d5e6f -> 9f8e7d6c5b4a (revision abc123000000 -> def456111111 of org/model)",
    )


def test_a_stale_message_names_both_origins_when_the_model_itself_was_swapped() -> None:
    old = _trace(_origin("org/model", OLD_REVISION))
    new = _trace(_origin("my-finetune", None, NEW_WEIGHTS))
    assert compare(old, new).stale_reasons == (
        "model changed: weights 1a2b3c4d5e6f -> 9f8e7d6c5b4a (org/model@abc123000000 -> my-finetune)",
    )


def test_a_side_without_an_origin_leaves_the_hashes_to_say_it() -> None:
    old = _trace(BASE)  # recorded before the fields
    new = _trace(_origin("org/model", NEW_REVISION, NEW_WEIGHTS))
    assert compare(old, new).stale_reasons == ("model changed: weights 1a2b3c4d5e6f -> 9f8e7d6c5b4a",)


def test_the_origin_is_not_the_identity_two_folders_with_the_same_weights_are_one_model() -> None:
    one, two = _trace(_origin("checkpoints/a", None)), _trace(_origin("/elsewhere/b", NEW_REVISION))
    assert one.model == two.model and one == two
    cmp = compare(one, two)
    assert cmp.verdict is Verdict.IDENTICAL and cmp.stale_reasons == ()


def test_the_origin_round_trips_and_a_trace_without_it_keeps_its_bytes() -> None:
    with_origin = _trace(_origin("org/model", OLD_REVISION))
    text = with_origin.to_json()
    assert '    "name_or_path": "org/model",\n' in text and f'    "revision": "{OLD_REVISION}",\n' in text
    loaded = GenerationTrace.from_json(text).model
    assert loaded is not None and (loaded.name_or_path, loaded.revision) == ("org/model", OLD_REVISION)
    plain = _trace(BASE).to_json()
    assert "name_or_path" not in plain and "revision" not in plain
    assert plain == _trace(_origin(None, None)).to_json()
    assert GenerationTrace.from_json(plain).to_json() == plain
    # The text a trace without an origin had before these fields: the model block's keys, sorted, nothing more.
    block = plain.split('"model": {\n', 1)[1].split("\n  },", 1)[0]
    assert [line.split(":")[0].strip() for line in block.splitlines()] == [
        '"config_hash"',
        '"dtype"',
        '"model_type"',
        '"num_parameters"',
        '"weights_hash"',
    ]
