"""The genguard_finetune fixture's per-machine training (pinned=False): memoized per process, one training per model
across xdist workers, --genguard-rebuild retrains once per run. (Pinned weights: tests/plugin/test_pins.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

# pytester's in-process runs drop modules first imported inside them, and torch cannot be imported twice in a process:
# import here what the inner runs use.
import safetensors.torch  # noqa: F401
import torch  # noqa: F401
from transformers import Seq2SeqTrainer, Trainer  # noqa: F401

import pytest_genguard.hf.finetune
import pytest_genguard.hf.recorder  # noqa: F401

# Each test writes what it got; the outer test reads the files (xdist workers cannot print to us reliably).
TESTS = """
import json, os
from pathlib import Path

from pytest_genguard.hf.weights_hash import weights_hash

def _report(name, tuned):
    manifest = json.loads((tuned.cache_path / "manifest.json").read_text())
    out = Path(os.environ["GENGUARD_TEST_OUT"]) / (name + "-" + os.environ.get("PYTEST_XDIST_WORKER", "main") + ".json")
    out.write_text(json.dumps({
        "id": id(tuned),
        "from_cache": tuned.from_cache,
        "build_id": manifest["build_id"],
        "weights": weights_hash(tuned.model),
        "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
    }))

def test_first(genguard_finetune):
    _report("first", genguard_finetune("gpt2", steps=2, pinned=False))

def test_second(genguard_finetune):
    _report("second", genguard_finetune("gpt2", steps=2, pinned=False))
"""


def _results(out: Path) -> list[dict[str, object]]:
    found = [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]
    for p in out.glob("*.json"):
        p.unlink()
    return found


def test_two_tests_share_one_model_and_a_new_session_loads_it(pytester: pytest.Pytester, project: Path) -> None:
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=2)
    first = _results(project)
    assert len(first) == 2
    assert first[0]["id"] == first[1]["id"]  # the same object: memoized in the process
    assert [r["from_cache"] for r in first] == [False, False]
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=2)
    second = _results(project)
    assert [r["from_cache"] for r in second] == [True, True]
    assert {r["build_id"] for r in first + second} == {first[0]["build_id"]}
    pytester.runpytest("-p", "no:cacheprovider", "--genguard-rebuild").assert_outcomes(passed=2)
    rebuilt = _results(project)
    assert [r["from_cache"] for r in rebuilt] == [False, False]  # retrained once, shared by both tests
    assert len({r["build_id"] for r in rebuilt}) == 1
    assert rebuilt[0]["build_id"] != first[0]["build_id"]
    assert {r["weights"] for r in first + second + rebuilt} == {first[0]["weights"]}


def test_xdist_workers_asking_for_one_model_train_it_once_even_with_rebuild(
    pytester: pytest.Pytester, project: Path
) -> None:
    # --dist each: both workers run both tests, so two processes ask for the same model at the same time; with
    # --genguard-rebuild the worker that waited must still load the model the other just trained for this run.
    args = ("-p", "no:cacheprovider", "-p", "xdist", "-n", "2", "--dist", "each", "--genguard-rebuild")
    pytester.runpytest_subprocess(*args).assert_outcomes(passed=4)
    results = _results(project)
    assert sorted({str(r["worker"]) for r in results}) == ["gw0", "gw1"]
    assert len({r["build_id"] for r in results}) == 1  # trained once per run, not once per worker
    by_worker = {r["worker"]: r["from_cache"] for r in results}
    assert sorted(by_worker.values()) == [False, True]  # one worker trained, the other waited and loaded
    assert len({r["weights"] for r in results}) == 1
