"""Shared plumbing for the genguard_snapshot pytester tests: hand-made traces (no torch) whose variants the outer
test switches between runs by rewriting ``variants.json`` (test name -> variant).

A variant can: add `drift` to step 0's logprob; `flip` step 1 to the near-tie runner-up ("tie") or step 2 to a
far-behind token ("genuine"); change the `weights`/`tokenizer` fingerprint (and the tokenizer's `vocab_size`,
`chat_template`, `parts`) or `max_new_tokens` (stale); put NaN in step 1 or -inf in step 2's score (`nonfinite`:
"nan" or "-inf"); set the `finish` reason (default "length").
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

PERTURBABLE_MODEL = """
@pytest.fixture(scope="module")
def model():
    \"\"\"Tiny gpt2; a file "perturb" beside the test file scales one MLP weight (a changed model, see perturb()).\"\"\"
    model = pytest_genguard.tiny_model("gpt2")
    if (HERE / "perturb").exists():
        with torch.no_grad():
            model.transformer.h[0].mlp.c_proj.weight.mul_(3.0)
    return model
"""
"""The `model` fixture of inner test files that verify a model and then a changed one (they import pytest, torch
and pytest_genguard, and define HERE, the test file's folder)."""


def perturb(folder: Path) -> None:
    """Make the `PERTURBABLE_MODEL` fixture of the test files in `folder` change the model from the next run on."""
    (folder / "perturb").touch()


XDIST = pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
N2 = ("-n", "2")

CONFTEST = '''
import json
from pathlib import Path

from pytest_genguard.core.trace import GenerationTrace, ModelFingerprint, PromptTrace, Step, TokenizerFingerprint

HERE = Path(__file__).parent
ENVIRONMENT = {"dtype": "float32", "device": "cpu", "logprobs": "float64"}  # as record() writes (logprobs in float64)


def make_trace(name):
    """The trace test `name` produces in this run (see tests/support/snapshot_support.py)."""
    path = HERE / "variants.json"
    v = json.loads(path.read_text()).get(name, {}) if path.exists() else {}
    drift = v.get("drift", 0.0)
    steps = [
        Step(10, " the", -0.5 + drift, 3.0, (10, 11, 12), (-0.5 + drift, -2.0, -3.0)),
        # a near tie: the runner-up is 0.0005 behind (fp32 tie_tol is 1e-3)
        Step(20, " cat", -1.0, 2.0, (20, 21, 22), (-1.0, -1.0005, -4.0)),
        Step(30, " sat", -0.2, 4.0, (30, 31, 32), (-0.2, -3.0, -5.0)),
    ]
    if v.get("flip") == "tie":
        steps = steps[:1] + [Step(21, " dog", -1.0001, 2.0, (21, 20, 22), (-1.0001, -1.0004, -4.0))]
    if v.get("flip") == "genuine":
        steps[2] = Step(32, " ran", -0.3, 4.0, (32, 30, 31), (-0.3, -1.5, -3.5))
    if v.get("nonfinite") == "nan":  # what a model with a NaN weight gives
        steps[1] = Step(20, " cat", float("nan"), float("nan"), (20, 21, 22), (float("nan"), float("nan"), -4.0))
    if v.get("nonfinite") == "-inf":
        steps[2] = Step(30, " sat", -0.2, float("-inf"), (30, 31, 32), (-0.2, -3.0, -5.0))
    return GenerationTrace(
        prompts=(PromptTrace("hello", (1, 2), tuple(steps), v.get("finish", "length"), "the cat sat"),),
        settings={"max_new_tokens": v.get("max_new_tokens", 3), "mode": "greedy", "record_top_k": 3},
        model=ModelFingerprint("gpt2", "c" * 64, v.get("weights", "a") * 64, 1000, v.get("dtype", "float32")),
        tokenizer=TokenizerFingerprint(
            "tiny", v.get("vocab_size", 768), v.get("tokenizer", "t") * 64, v.get("chat_template"), v.get("parts")
        ),
        environment={**ENVIRONMENT, "dtype": v.get("dtype", "float32"), **v.get("environment", {})},
    )
'''


def setup(pytester: pytest.Pytester, tests: str, **variants: dict[str, Any]) -> None:
    """Write the trace-making conftest, the test module ``test_gen.py`` and the variants."""
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_gen=tests)
    set_variants(pytester, **variants)


def set_variants(pytester: pytest.Pytester, **variants: dict[str, Any]) -> None:
    (pytester.path / "variants.json").write_text(json.dumps(variants))


def snapshot_path(pytester: pytest.Pytester, name: str, module: str = "test_gen") -> Path:
    return pytester.path / "__snapshots__" / module / f"{name}.genguard"


# Plugins the inner runs do not need: each costs seconds of start-up in every pytest-xdist worker.
QUIET = ("-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:benchmark", "-p", "no:anyio")


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """An in-process pytest run. When this suite itself runs under pytest-xdist, the worker's environment would make
    syrupy (and genguard) inside the inner run believe they are xdist workers too: hide it."""
    with pytest.MonkeyPatch.context() as mp:
        for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
            mp.delenv(name, raising=False)
        return pytester.runpytest(*QUIET, *args)


def file_state(path: Path) -> tuple[bytes, int]:
    """Bytes and modification time (ns): both must stay the same when nothing may be written."""
    return path.read_bytes(), os.stat(path).st_mtime_ns


def age(path: Path) -> None:
    """Move the file's mtime into the past, so that a rewrite within the same clock tick still shows."""
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))


ONE_TEST = """
from conftest import make_trace

def test_greedy(genguard_snapshot):
    assert make_trace("test_greedy") == genguard_snapshot
"""
