"""One set of snapshots gives the right verdict on every CPU: tiny models are bitwise the same under every kernel
set, a project recorded under AVX2 passes under the others (pinned weights for decoding, the training tolerance for
training), and what the tolerance is for still fails: a 0.5% logit-scale drift of the same weights, and training
faults (EOS masked in the labels, a doubled learning rate, labels shifted by one)."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

# pytester's in-process runs drop modules first imported inside them, and torch cannot be imported twice in a process:
# import here what the inner runs use.
import safetensors.torch  # noqa: F401
from kernel_sets import params, supported
from transformers import Seq2SeqTrainer, Trainer  # noqa: F401

import pytest_genguard.hf.recorder  # noqa: F401
from pytest_genguard.hf import recipe as recipe_module, training as training_module
from pytest_genguard.hf.environment import cpu_model

# weights_hash(tiny_model(arch, seed)): recorded once; every machine, kernel set and transformers version must agree.
GOLDEN = {
    ("gpt2", 0): "ecaf03b692720225018705647889012397f5705d7518776e9d0553cbda25aa99",
    ("llama", 0): "f4d0f5f400e598a5e52622e0eaa155830df21a20c8503bc7219278feacd88deb",
    ("t5", 0): "2edf9b03f3def5d4e7e656e603112fe10ff229172959999e6d9f7e0e5e94449c",
    ("gpt2", 7): "333edc8f5fe3a4324a98c5fc92ef69b99e96aa3a89e0ecbbe1d9d17f925ff711",
    ("llama", 7): "a149196a608380d638590c42a31ce65ac31abf7b93776fa195b9b1c99645eb98",
    ("t5", 7): "a949ba9ecb7c659349b9e106b1d362119b567bf94cb045758af1dd760acf3836",
}

FACTS = """
import json
from pytest_genguard.hf.cache import cache_key
from pytest_genguard.hf.environment import cpu_capability
from pytest_genguard.hf.finetune import cache_key_parts
from pytest_genguard.hf.recipe import Recipe
from pytest_genguard.hf.tiny import tiny_model, tiny_tokenizer
from pytest_genguard.hf.weights_hash import weights_hash
hashes = {f"{a}/{s}": weights_hash(tiny_model(a, seed=s)) for a in ("gpt2", "llama", "t5") for s in (0, 7)}
key = cache_key(cache_key_parts(Recipe.of("gpt2"), tiny_model("gpt2"), tiny_tokenizer()))
print(json.dumps({"capability": cpu_capability(), "hashes": hashes, "key": key}))
"""
"""What an interpreter under a kernel set finds: its kernel set, the tiny models' weights hashes, the fine-tuning cache
key (one interpreter for all three: each start-up imports torch and transformers)."""


def _python(code: str, kernel_set: str) -> Any:
    env = {**os.environ, "ATEN_CPU_CAPABILITY": kernel_set}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def facts() -> Callable[[str], Any]:
    """kernel set -> `FACTS` found under it (asked once per kernel set per process)."""
    return functools.cache(lambda kernel_set: _python(FACTS, kernel_set))


@pytest.mark.parametrize("kernel_set", params("default", "avx2", "avx512"))
def test_tiny_models_are_bitwise_the_same_under_every_cpu_kernel_set(
    kernel_set: str, facts: Callable[[str], Any]
) -> None:
    found = facts(kernel_set)
    assert found["capability"] == {"default": "DEFAULT", "avx2": "AVX2", "avx512": "AVX512"}[kernel_set]
    assert found["hashes"] == {f"{a}/{s}": h for (a, s), h in GOLDEN.items()}


def test_the_fine_tuning_cache_key_names_the_cpu_kernel_set(facts: Callable[[str], Any]) -> None:
    # Training amplifies the kernels' rounding: a model trained under AVX2 must not be served under the scalar kernels
    # (the same command would pass or fail depending on which kernel set filled the cache first).
    if not supported("avx2"):
        pytest.skip("this CPU cannot run the avx2 kernel set")
    assert facts("default")["key"] != facts("avx2")["key"]
    assert _python(FACTS, "avx2")["key"] == facts("avx2")["key"]  # another interpreter: nothing else about it moves it


def test_the_portable_initialisation_keeps_the_standard_deviations_transformers_uses() -> None:
    from pytest_genguard.hf.tiny import tiny_model

    for arch, expected in (
        ("gpt2", {"transformer.wte.weight": 0.02, "transformer.h.0.attn.c_proj.weight": 0.01}),
        ("llama", {"model.embed_tokens.weight": 0.02, "model.layers.0.mlp.down_proj.weight": 0.02}),
        ("t5", {"shared.weight": 1.0, "encoder.block.0.layer.0.SelfAttention.q.weight": 1 / 32}),
    ):
        weights = {name: p.detach() for name, p in tiny_model(arch).named_parameters()}
        for name, std in expected.items():
            assert float(weights[name].std()) == pytest.approx(std, rel=0.05), (arch, name)
        assert all(float(p.abs().max()) <= 1.0 * 3**0.5 * 1.0001 for p in weights.values())


# ---------------------------------------------------------------------------------------------------- a project

PROJECT = """
import os
from pytest_genguard import record

PROMPTS = ["the quick", "once upon a", "the train"]


def test_decoding(genguard_finetune, genguard_snapshot):
    tuned = genguard_finetune("gpt2")
    scale = float(os.environ.get("GENGUARD_TEST_LOGIT_SCALE", "1"))
    if scale != 1:  # the same weights, logits 0.5% larger: a kernel or dtype bug of the kind genguard exists for
        tuned.model.lm_head.register_forward_hook(lambda module, args, output: output * scale)
    assert record(tuned.model, tuned.tokenizer, PROMPTS, max_new_tokens=16, top_k=5) == genguard_snapshot


def test_training(genguard_finetune, genguard_snapshot):
    assert genguard_finetune("gpt2", pinned=False).history == genguard_snapshot
"""

QUIET = ("-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:benchmark", "-p", "no:anyio")


@pytest.fixture(scope="module")
def recorded_under_avx2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project whose snapshots and pin were recorded under the AVX2 kernels (as on a CI runner without AVX-512)."""
    if not supported("avx2"):
        pytest.skip("this CPU cannot run the avx2 kernel set")
    root = tmp_path_factory.mktemp("portable")
    (root / "test_portable.py").write_text(PROJECT)
    (root / "pytest.ini").write_text("[pytest]\n")
    done = _pytest(root, "avx2", "--snapshot-update")
    assert "2 passed" in done.stdout, done.stdout
    return root


def _pytest(root: Path, kernel_set: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "ATEN_CPU_CAPABILITY": kernel_set, "GENGUARD_CACHE_DIR": str(root / f"cache-{kernel_set}")}
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID", "PYTEST_ADDOPTS"):
        environ.pop(name, None)
    environ.update(env)
    command = [sys.executable, "-m", "pytest", *QUIET, "-p", "no:xdist", "-q", *args]
    return subprocess.run(command, cwd=root, env=environ, capture_output=True, text=True, check=False)


@pytest.mark.parametrize("kernel_set", params("default", "avx512"))
def test_a_project_recorded_under_avx2_passes_under_other_kernel_sets(
    recorded_under_avx2: Path, kernel_set: str
) -> None:
    done = _pytest(recorded_under_avx2, kernel_set)
    assert done.returncode == 0, done.stdout
    assert "snapshots: 2 matched" in done.stdout


@pytest.mark.parametrize("kernel_set", params("default", "avx2"))
def test_a_half_percent_logit_scale_drift_of_the_same_weights_still_fails(
    recorded_under_avx2: Path, kernel_set: str
) -> None:
    done = _pytest(recorded_under_avx2, kernel_set, "-k", "decoding", GENGUARD_TEST_LOGIT_SCALE="1.005")
    assert done.returncode == 1, done.stdout
    assert "regression: prompt 0 'the quick' drifts at step 0" in done.stdout
    assert "snapshots: 0 matched, 0 tolerated divergences, 0 stale, 1 regressed" in done.stdout


# ---------------------------------------------------------------------------------------------------- training faults


def _mask_eos(collate: Any) -> Any:
    """The ``pad_token = eos_token`` bug: EOS is masked in the labels with the padding, the model never learns it."""

    def call(self: Any, batch: list[dict[str, list[int]]]) -> dict[str, Any]:
        out = collate(self, batch)
        out["labels"] = out["labels"].masked_fill(out["labels"] == 2, -100)
        return dict(out)

    return call


def _shift_labels(collate: Any) -> Any:
    """Labels shifted by one: the model learns to predict the token after next."""

    def call(self: Any, batch: list[dict[str, list[int]]]) -> dict[str, Any]:
        out = collate(self, batch)
        labels = out["labels"]
        out["labels"] = labels.roll(-1, dims=1).masked_fill(labels.roll(-1, dims=1) == 0, -100)
        out["labels"][:, -1] = -100
        return dict(out)

    return call


def _double_lr(make_args: Any) -> Any:
    """A training stack that doubles the learning rate it was given (the recipe still says 1e-2)."""

    def call(spec: Any, output_dir: str, progress: bool) -> Any:
        args = make_args(spec, output_dir, progress)
        args.learning_rate = spec.learning_rate * 2
        return args

    return call


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        ("eos-masked", "regression: 5 checkpoints, worst at checkpoint *"),
        ("lr-doubled", "regression: 5 checkpoints, worst at checkpoint *"),
        ("labels-shifted", "regression: 5 checkpoints, worst at checkpoint *"),
    ],
)
def test_the_training_tolerance_still_catches_real_training_changes(
    recorded_under_avx2: Path, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, fault: str, expected: str
) -> None:
    if fault == "lr-doubled":
        monkeypatch.setattr(training_module, "training_arguments", _double_lr(training_module.training_arguments))
    else:
        wrap = _mask_eos if fault == "eos-masked" else _shift_labels
        monkeypatch.setattr(recipe_module.Collator, "__call__", wrap(recipe_module.Collator.__call__))
    (pytester.path / "test_portable.py").write_text(PROJECT)
    snapshots = recorded_under_avx2 / "__snapshots__"
    target = pytester.path / "__snapshots__" / "test_portable"
    target.mkdir(parents=True)
    stored = (snapshots / "test_portable" / "test_training.genguard").read_text()
    # As trained on another CPU: in the recording environment a history is compared bitwise, and this test is about
    # what the training tolerance (the rule everywhere else) still catches.
    here = f'"cpu": {json.dumps(cpu_model())}'
    assert here in stored
    target.joinpath("test_training.genguard").write_text(stored.replace(here, '"cpu": "another CPU"'))
    monkeypatch.setenv("GENGUARD_CACHE_DIR", str(pytester.path / "cache"))
    result = pytester.runpytest(*QUIET, "-k", "training")
    result.assert_outcomes(failed=1, deselected=1)
    result.stdout.fnmatch_lines([f"E  *{expected} (training tolerance: *"])
