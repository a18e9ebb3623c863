"""Identity survives library versions: the same weights, tokenizer, settings and prompts recorded under transformers
4.57.x and 5.x are the same subject (compared, never stale), for user models and checkpoints saved by either
version; a real architecture change a user makes is still stale, naming the key. This module runs on every
transformers version CI installs, against the traces every other version committed (tests/support/cross_version.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import transformers
from cross_version import CASES, FIXTURES, record_case

from pytest_genguard import GenerationTrace, Verdict, compare
from pytest_genguard.core.comparison import render

VERSIONS = sorted(p.name.removeprefix("transformers-") for p in FIXTURES.iterdir() if p.is_dir())


def test_traces_of_both_majors_are_committed() -> None:
    majors = {v.split(".")[0] for v in VERSIONS}
    assert {"4", "5"} <= majors, VERSIONS


def _stored(version: str, case: str) -> GenerationTrace:
    path = FIXTURES / f"transformers-{version}" / f"{case}.json"
    return GenerationTrace.from_json(path.read_text(encoding="utf-8"), source=str(path))


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("version", VERSIONS)
def test_a_trace_recorded_under_another_transformers_version_is_compared_not_stale(version: str, case: str) -> None:
    stored = _stored(version, case)
    now = record_case(case, FIXTURES / f"transformers-{version}" / "llama-config.json")
    cmp = compare(stored, now)
    # untrained tiny models have near ties, which another CPU's rounding may flip: TOLERATED is a pass too
    assert cmp.verdict in (Verdict.IDENTICAL, Verdict.WITHIN_TOLERANCE, Verdict.TOLERATED), render(cmp)
    assert stored.environment["transformers"] == version
    if version != transformers.__version__:
        assert ("transformers", version, transformers.__version__) in cmp.environment_diff
        recorded_on = render(cmp).splitlines()[1].partition(", now ")[0]
        assert f"transformers {version}" in recorded_on or cmp.verdict is Verdict.IDENTICAL


def test_a_checkpoint_config_written_by_4_57_and_by_5_is_one_architecture() -> None:
    old, new = (_stored(v, "llama-checkpoint").model for v in (VERSIONS[0], VERSIONS[-1]))
    assert old is not None and new is not None and old.config is not None and new.config is not None
    common = set(old.config) & set(new.config)
    assert {k: old.config[k] for k in common} == {k: new.config[k] for k in common}
    assert "rope_parameters.rope_theta" in common  # rope_theta (4.57) and rope_parameters (5.x) spelled one way
    # what 4.57 writes and 5.x dropped: one-sided keys, which never count
    assert set(old.config) - common == {"add_cross_attention", "is_decoder", "tie_encoder_decoder"}
    assert set(new.config) - common == set()
    assert old.weights_hash == new.weights_hash


def test_a_real_architecture_change_is_still_stale_and_names_the_key() -> None:
    stored = _stored(VERSIONS[0], "llama-greedy")
    assert stored.model is not None and stored.model.config is not None
    changed = dataclasses.replace(stored.model, config={**stored.model.config, "rms_norm_eps": 1e-5})
    cmp = compare(stored, dataclasses.replace(stored, model=changed))
    assert cmp.verdict is Verdict.STALE
    assert cmp.stale_reasons == ("model changed: config rms_norm_eps 1e-06 -> 1e-05",)


def test_a_config_key_one_version_writes_and_another_does_not_is_no_change() -> None:
    stored = _stored(VERSIONS[0], "llama-greedy")
    assert stored.model is not None and stored.model.config is not None
    extra = {**stored.model.config, "use_bidirectional_attention": False}  # a key 5.x adds to some configs
    less = {k: v for k, v in stored.model.config.items() if k != "mlp_bias"}
    for config in (extra, less):
        cmp = compare(stored, dataclasses.replace(stored, model=dataclasses.replace(stored.model, config=config)))
        assert cmp.verdict is Verdict.IDENTICAL


def test_a_trace_from_pytest_genguard_0_1_without_a_config_is_judged_by_its_weights(tmp_path: Path) -> None:
    stored = _stored(VERSIONS[-1], "gpt2-greedy")
    assert stored.model is not None
    old = dataclasses.replace(stored, model=dataclasses.replace(stored.model, config=None, config_hash="0" * 64))
    assert compare(old, stored).verdict is Verdict.IDENTICAL  # another hash of the config: not comparable, not stale
    other = dataclasses.replace(old.model, weights_hash="f" * 64)  # type: ignore[arg-type]
    assert compare(dataclasses.replace(old, model=other), stored).verdict is Verdict.STALE


# Gemma 3's rope as each major writes it (``config.to_dict()`` of Gemma3TextConfig(rope_theta=1e6,
# rope_local_base_freq=1e4, rope_scaling={"rope_type": "linear", "factor": 8.0}), the 4B-27B models' settings): 4.57
# names the sliding-window layers' base on its own, 5.x keeps one set of rope parameters per layer type.
GEMMA3_ROPE_457 = {
    "model_type": "gemma3_text",
    "rope_theta": 1000000.0,
    "rope_local_base_freq": 10000.0,
    "rope_scaling": {"rope_type": "linear", "factor": 8.0},
    "sliding_window": 1024,
}
GEMMA3_ROPE_5 = {
    "model_type": "gemma3_text",
    "rope_parameters": {
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
    },
    "sliding_window": 1024,
}


def test_gemma3s_rope_per_layer_type_is_one_spelling_on_4_57_and_5() -> None:
    from transformers import Gemma3TextConfig

    from pytest_genguard.hf.fingerprint import architecture_config

    expected = {
        "model_type": "gemma3_text",
        "rope_parameters.full_attention.factor": 8,
        "rope_parameters.full_attention.rope_theta": 1000000,
        "rope_parameters.full_attention.rope_type": "linear",
        "rope_parameters.sliding_attention.rope_theta": 10000,
        "rope_parameters.sliding_attention.rope_type": "default",
        "sliding_window": 1024,
    }
    assert architecture_config(GEMMA3_ROPE_457) == architecture_config(GEMMA3_ROPE_5) == expected
    installed = Gemma3TextConfig(
        rope_theta=1e6,
        rope_local_base_freq=1e4,
        rope_scaling={"rope_type": "linear", "factor": 8.0},
        sliding_window=1024,
    )
    assert {k: v for k, v in architecture_config(installed.to_dict()).items() if k.startswith("rope")} == {
        k: v for k, v in expected.items() if k.startswith("rope")
    }
    # Its negative control: the sliding layers' base moved is a key both majors share, so a snapshot names it.
    moved = architecture_config({**GEMMA3_ROPE_457, "rope_local_base_freq": 1e5})
    assert moved["rope_parameters.sliding_attention.rope_theta"] == 100000
