"""finetune(): sharp fine-tuned tiny models from a real Trainer, cached by content and rebuilt when corrupt."""

from __future__ import annotations

import dataclasses
import importlib
import json
import random
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers

from pytest_genguard import GenguardCacheWarning
from pytest_genguard.core.files import file_sha256
from pytest_genguard.hf.cache import HISTORY_FILE, MANIFEST, WEIGHTS_FILE, cache_key
from pytest_genguard.hf.finetune import FineTuned, cache_key_parts, finetune
from pytest_genguard.hf.recipe import DEFAULT_STEPS, Collator, Recipe, encoder_input, examples_for, recipe_hash
from pytest_genguard.hf.record import record
from pytest_genguard.hf.run_state import preserved_rng
from pytest_genguard.hf.tiny import ARCHS, finetune_texts, probe_prompts, tiny_model, tiny_tokenizer
from pytest_genguard.hf.weights_hash import weights_hash
from pytest_genguard.plugin.tally import EVENTS_KEY

pytestmark = pytest.mark.usefixtures("one_thread")  # (tests/hf/conftest.py)

MIN_MARGIN = 4.5  # measured 4.86 (gpt2), 7.60 (llama), 5.91 (t5) nats with the portable initialisation
"""The smallest top-1/top-2 margin (nats) every default model keeps on every greedy step of every probe prompt."""
QUICK = 2  # steps for tests that exercise the cache, not the quality of the model


@pytest.fixture(scope="module")
def defaults(tmp_path_factory: pytest.TempPathFactory) -> dict[str, FineTuned]:
    root = tmp_path_factory.mktemp("default-models")
    return {arch: finetune(arch, cache_dir=root, progress=False) for arch in ARCHS}


@pytest.mark.parametrize("arch", ARCHS)
def test_default_models_reach_eos_on_every_probe_with_a_sharp_margin(defaults: dict[str, FineTuned], arch: str) -> None:
    tuned = defaults[arch]
    trace = record(tuned.model, tuned.tokenizer, probe_prompts(), max_new_tokens=24, top_k=5)
    for prompt in trace:
        sentence = next(t for t in finetune_texts() if t.startswith(prompt.prompt))
        assert prompt.finish_reason == "eos", (arch, prompt.prompt, prompt.text)
        assert prompt.prompt + prompt.text == sentence
        assert prompt.min_margin >= MIN_MARGIN, (arch, prompt.prompt, prompt.min_margin)
    # The history's last checkpoint recorded these very weights (training ran on one thread: rounding may differ).
    last = tuned.history[-1]
    assert last.step == DEFAULT_STEPS[arch]
    assert [p.token_ids for p in last.trace] == [p.token_ids for p in trace]
    assert [p.min_margin for p in last.trace] == pytest.approx([p.min_margin for p in trace], abs=1e-3)
    assert tuned.fingerprint == trace.model
    assert not tuned.model.training
    assert tuned.model.config.is_encoder_decoder == (arch == "t5")


def test_the_history_shows_the_model_learning(defaults: dict[str, FineTuned]) -> None:
    history = defaults["llama"].history
    assert [c.step for c in history] == [DEFAULT_STEPS["llama"] // 4 * i for i in range(1, 5)]
    losses = [c.loss for c in history]
    assert all(loss is not None for loss in losses)
    assert losses[-1] < losses[0]
    assert history[-1].trace.min_margin > history[0].trace.min_margin


# ------------------------------------------------------------------------------------------------ data


def test_labels_keep_eos_and_mask_only_padding() -> None:
    tokenizer = tiny_tokenizer()
    assert tokenizer.pad_token_id != tokenizer.eos_token_id
    spec = Recipe.of("gpt2", steps=1, seed=0, corpus=["one two three.", "a b."], learning_rate=1e-2, batch_size=2)
    batch = Collator(int(tokenizer.pad_token_id))([examples_for(spec, tokenizer)[0], examples_for(spec, tokenizer)[1]])
    for row_ids, row_mask, row_labels in zip(batch["input_ids"], batch["attention_mask"], batch["labels"], strict=True):
        length = int(row_mask.sum())
        assert int(row_ids[length - 1]) == tokenizer.eos_token_id  # every text ends in EOS...
        assert int(row_labels[length - 1]) == tokenizer.eos_token_id  # ...which is a target, not masked
        assert row_labels[:length].tolist() == row_ids[:length].tolist()
        assert set(row_labels[length:].tolist()) <= {-100}
    assert (batch["labels"] == -100).any()  # the shorter row is padded


def test_t5_learns_the_rest_of_each_sentence_from_its_probe_prefix() -> None:
    prompts = probe_prompts()
    assert encoder_input("the quick brown fox jumps over the lazy dog.", prompts) == "the quick"
    assert encoder_input("once upon a time there was a little cat.", prompts) == "once upon a"
    assert encoder_input("my favourite colour is blue.", prompts) == "my favourite"
    tokenizer = tiny_tokenizer()
    example = examples_for(Recipe.of("t5", steps=1, learning_rate=1e-2, batch_size=8), tokenizer)[0]
    assert tokenizer.decode(example["input_ids"]) == "the quick"
    assert tokenizer.decode(example["labels"]) == " brown fox jumps over the lazy dog.</s>"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"arch": "bert"}, r"finetune\(arch='bert'\): unknown arch; valid archs are gpt2, llama, t5"),
        ({"steps": 0}, r"finetune\(steps=0\)"),
        ({"batch_size": 0}, r"finetune\(batch_size=0\)"),
        ({"learning_rate": 0.0}, r"finetune\(learning_rate=0.0\)"),
        ({"corpus": []}, r"finetune\(corpus=...\): pass a non-empty list"),
        ({"prompts": [""]}, r"finetune\(prompts=...\): pass a non-empty list"),
    ],
)
def test_bad_finetune_arguments_are_named(tmp_path: Path, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        finetune(**{"cache_dir": tmp_path, **kwargs})
    assert not list(tmp_path.iterdir())


# ------------------------------------------------------------------------------------------------ cache


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("quick-models")
    state = random.getstate(), torch.get_rng_state()
    cold = finetune("gpt2", steps=QUICK, cache_dir=root, progress=False)
    rng_untouched = (random.getstate(), torch.get_rng_state())
    warm = finetune("gpt2", steps=QUICK, cache_dir=root, progress=False)
    return {"root": root, "cold": cold, "warm": warm, "rng": (state, rng_untouched)}


def test_a_second_request_loads_the_same_model_from_the_cache(quick: dict[str, Any]) -> None:
    cold, warm = quick["cold"], quick["warm"]
    assert (cold.from_cache, warm.from_cache) == (False, True)
    assert cold.cache_key == warm.cache_key
    assert weights_hash(warm.model) == weights_hash(cold.model) == cold.fingerprint.weights_hash
    assert warm.fingerprint == cold.fingerprint
    assert warm.history == cold.history
    assert warm.train_seconds == cold.train_seconds > 0
    assert not warm.model.training
    entry = quick["root"] / cold.cache_key
    manifest = json.loads((entry / MANIFEST).read_text())
    assert manifest["fingerprint"] == dataclasses.asdict(cold.fingerprint)
    assert {WEIGHTS_FILE, HISTORY_FILE, "config.json"} <= set(manifest["files"])
    assert manifest["versions"]["transformers"] == transformers.__version__


def test_quiet_training_prints_nothing_and_adds_no_record_events_to_the_test(
    request: pytest.FixtureRequest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    events = request.node.stash[EVENTS_KEY]
    finetune("gpt2", steps=2, cache_dir=tmp_path, progress=False)
    out, err = capsys.readouterr()
    assert "2/2" not in err and "'loss'" not in out  # no bar, and no PrinterCallback dicts instead
    assert not [e for e in events if e.kind == "record"]
    tuned = finetune("gpt2", steps=2, cache_dir=tmp_path, progress=False)
    record(tuned.model, tuned.tokenizer, "the quick", max_new_tokens=2)  # negative control: the test's own record
    assert [e.kind for e in events] == ["record"]


def test_finetune_leaves_the_callers_rng_streams_alone(quick: dict[str, Any]) -> None:
    (before_py, before_torch), (after_py, after_torch) = quick["rng"]
    assert before_py == after_py
    assert torch.equal(before_torch, after_torch)
    with preserved_rng():  # negative control: what the Trainer does to them at the start of training
        transformers.set_seed(0)
        assert random.getstate() != before_py or not torch.equal(torch.get_rng_state(), before_torch)


def _parts(**change: Any) -> dict[str, Any]:
    settings: dict[str, Any] = {"steps": QUICK, "seed": 0, "corpus": None, "prompts": None}
    settings.update({"learning_rate": 1e-2, "batch_size": 8, **change})
    spec = Recipe.of("gpt2", **settings)
    parts: dict[str, Any] = cache_key_parts(spec, tiny_model("gpt2", seed=spec.seed), tiny_tokenizer())
    return parts


def _key(**change: Any) -> str:
    return cache_key(_parts(**change))


@pytest.mark.parametrize(
    "change",
    [
        {"seed": 1},
        {"steps": QUICK + 1},
        {"learning_rate": 5e-3},
        {"batch_size": 4},
        {"corpus": ["a b c."]},
        {"prompts": ["the"]},
    ],
)
def test_every_setting_that_changes_the_result_changes_the_cache_key(
    quick: dict[str, Any], change: dict[str, Any]
) -> None:
    assert _key() == quick["cold"].cache_key
    assert _key(**change) != quick["cold"].cache_key


def _copy_entry(quick: dict[str, Any], tmp_path: Path) -> Path:
    import shutil

    entry = quick["root"] / quick["cold"].cache_key
    shutil.copytree(entry, tmp_path / entry.name)
    return tmp_path / entry.name


@pytest.mark.parametrize("damage", ["truncate_weights", "delete_manifest", "other_valid_weights"])
def test_a_damaged_entry_warns_with_its_path_and_is_rebuilt_identically(
    quick: dict[str, Any], tmp_path: Path, damage: str
) -> None:
    entry = _copy_entry(quick, tmp_path)
    weights = entry / WEIGHTS_FILE
    if damage == "truncate_weights":
        weights.write_bytes(weights.read_bytes()[:1000])
        match = "does not match its sha256"
    elif damage == "delete_manifest":
        (entry / MANIFEST).unlink()
        match = "no manifest.json"
    else:  # valid weights of another model, checksum updated: only the fingerprint check can tell
        from safetensors.torch import save_model

        save_model(tiny_model("gpt2", seed=7), str(weights))
        manifest = json.loads((entry / MANIFEST).read_text())
        manifest["files"][WEIGHTS_FILE]["sha256"] = file_sha256(weights)
        (entry / MANIFEST).write_text(json.dumps(manifest))
        match = "fingerprint"
    with pytest.warns(GenguardCacheWarning, match=match) as warned:
        rebuilt = finetune("gpt2", steps=QUICK, cache_dir=tmp_path, progress=False)
    assert str(entry) in str(warned[0].message)
    assert not rebuilt.from_cache
    assert rebuilt.fingerprint == quick["cold"].fingerprint  # training is deterministic
    assert finetune("gpt2", steps=QUICK, cache_dir=tmp_path, progress=False).from_cache


def test_rebuild_retrains_a_valid_entry(quick: dict[str, Any], tmp_path: Path) -> None:
    entry = _copy_entry(quick, tmp_path)
    before = json.loads((entry / MANIFEST).read_text())["build_id"]
    rebuilt = finetune("gpt2", steps=QUICK, cache_dir=tmp_path, rebuild=True, progress=False)
    assert not rebuilt.from_cache
    assert json.loads((entry / MANIFEST).read_text())["build_id"] != before
    assert rebuilt.fingerprint == quick["cold"].fingerprint


def test_progress_shows_the_trainers_bar_and_logs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    finetune("gpt2", steps=2, cache_dir=tmp_path, progress=True)
    out, err = capsys.readouterr()
    assert "2/2" in err  # the Trainer's tqdm bar
    assert "'loss'" in out  # and its log lines


def _recipe(**change: Any) -> str:
    settings: dict[str, Any] = {"steps": QUICK, "seed": 0, "corpus": None, "prompts": None}
    settings.update({"learning_rate": 1e-2, "batch_size": 8, **change})
    return recipe_hash(Recipe.of("gpt2", **settings))


def test_the_recipe_names_how_the_model_was_made_but_not_the_library_versions(
    quick: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    ft = importlib.import_module(
        "pytest_genguard.hf.finetune"
    )  # the module (pytest_genguard.hf.finetune is the function)

    parts = _parts()
    recipe = _recipe()
    monkeypatch.setattr(
        ft, "_versions", lambda: {"torch": "99.0", "transformers": "9.0", "accelerate": "9.0", "pytest-genguard": "0"}
    )
    monkeypatch.setattr(ft, "training_defaults", lambda: {"optim": "another-default"})
    upgraded = _parts()
    assert cache_key(upgraded) != cache_key(parts)  # an upgrade retrains (the cache key sees versions) ...
    assert _recipe() == recipe  # ... but it is the same model: compared for drift, not called stale
    for change in ({"seed": 1}, {"steps": QUICK + 1}, {"learning_rate": 5e-3}, {"corpus": ["a b c."]}):
        assert _recipe(**change) != recipe, change
    assert quick["cold"].fingerprint.recipe == recipe
    assert quick["cold"].model.config.genguard_recipe == recipe
