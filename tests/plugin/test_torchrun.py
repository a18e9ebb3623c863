"""A genguard suite under ``torchrun`` (`plugin.distributed`): the tiny llama split over two ranks by transformers'
tensor parallelism (``tp_plan="auto"``, the gloo backend on the CPU), in one run of
``torchrun --standalone --nproc-per-node 2 -m pytest --snapshot-update-new-only``. Both ranks record and judge every
assertion, rank 0 alone writes, both get the verdict: a missing snapshot is created once, one recorded in a single
process holds (within the rule: the ranks' all-reduces sum in another order), an edited one fails on both ranks and is
left as it was, and ranks that computed different things fail on both and write nothing."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from transformers import AutoModelForCausalLM

from pytest_genguard import record
from pytest_genguard.hf.tiny import tiny_model, tiny_tokenizer

PROMPTS = ["hello world", "the cat sat"]

TESTS = """
import os

import pytest
from transformers import AutoModelForCausalLM

from pytest_genguard import record
from pytest_genguard.core.compare import compare
from pytest_genguard.hf.tiny import tiny_tokenizer

FOLDER = os.environ["TINY_LLAMA"]
PROMPTS = ["hello world", "the cat sat"]


@pytest.fixture(scope="module")
def sharded():
    return AutoModelForCausalLM.from_pretrained(FOLDER, tp_plan="auto")


def test_created(sharded, genguard_snapshot):
    trace = record(sharded, tiny_tokenizer(), PROMPTS, max_new_tokens=6)
    single = record(AutoModelForCausalLM.from_pretrained(FOLDER), tiny_tokenizer(), PROMPTS, max_new_tokens=6)
    assert trace.environment["tensor_parallel"] == 2 and "tensor_parallel" not in single.environment
    assert trace.model == single.model  # the same weights hash: each DTensor hashed whole
    assert compare(single, trace)
    assert trace == genguard_snapshot


def test_verified(sharded, genguard_snapshot):
    genguard_snapshot.verify(sharded, tiny_tokenizer(), PROMPTS, max_new_tokens=6)


def test_recorded_in_one_process(sharded, genguard_snapshot):
    assert record(sharded, tiny_tokenizer(), PROMPTS, max_new_tokens=6) == genguard_snapshot


def test_edited(sharded, genguard_snapshot):
    assert record(sharded, tiny_tokenizer(), PROMPTS, max_new_tokens=6) == genguard_snapshot


def test_rank_dependent(genguard_snapshot):
    # a model of its own on each rank (a tensor-parallel one needs the same inputs on every rank), other prompts
    prompt = "hello" if os.environ["RANK"] == "0" else "the cat"
    own = AutoModelForCausalLM.from_pretrained(FOLDER)
    assert record(own, tiny_tokenizer(), [prompt], max_new_tokens=4) == genguard_snapshot
"""

CONFTEST = """
import os

from pytest_genguard.plugin import stores


def refuse(*args, **kwargs):
    raise AssertionError("rank 1 wrote a snapshot")


if os.environ["RANK"] == "1":  # a follower that writes fails its test
    stores.SharedStore.write = refuse
"""


def outcomes(output: str) -> dict[str, str]:
    """Each test's outcome from ``-rA``'s short summary: {"test_created": "PASSED", ...}. Only the summary's own
    lines count: on CI pytest does not cut a failure's message short, and its lines name tests too."""
    found = {}
    for line in output.splitlines():
        word, _, rest = line.partition(" test_models.py::")
        if rest and word in ("PASSED", "FAILED", "ERROR", "SKIPPED", "XFAIL", "XPASS"):
            found.setdefault(rest.split()[0], word)
    return found


def test_both_ranks_judge_every_assertion_and_rank_0_alone_writes(
    project: Path, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = pytester.path / "tiny-llama"
    tiny_model("llama").save_pretrained(folder)
    monkeypatch.setenv("TINY_LLAMA", str(folder))
    pytester.makeconftest(CONFTEST)
    snapshots = pytester.path / "__snapshots__" / "test_models"
    snapshots.mkdir(parents=True)
    single = record(AutoModelForCausalLM.from_pretrained(folder), tiny_tokenizer(), PROMPTS, max_new_tokens=6)
    (snapshots / "test_recorded_in_one_process.genguard").write_text(single.to_json())
    edited = json.loads(single.to_json())
    edited["prompts"][0]["steps"][0]["logprob"] -= 0.5
    (snapshots / "test_edited.genguard").write_text(json.dumps(edited, indent=1))

    pytester.run(
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "--log-dir", "logs",
        "-r", "3", "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "-q", "-rA",
        "--snapshot-update-new-only", timeout=600,
    )  # fmt: skip
    for rank in (0, 1):
        output = next(pytester.path.glob(f"logs/*/attempt_0/{rank}/stdout.log")).read_text()
        assert outcomes(output) == {
            "test_created": "PASSED",
            "test_verified": "PASSED",
            "test_recorded_in_one_process": "PASSED",
            "test_edited": "FAILED",
            "test_rank_dependent": "FAILED",
        }, output
        assert "regression: prompt 0 'hello world'" in output
        assert "the ranks of this torchrun job disagree (rank 0: nothing to compare with (would write" in output
    # Written once, by rank 0 (rank 1's writes fail its tests: CONFTEST); nothing where the ranks disagreed, and the
    # edited snapshot left as it was.
    assert sorted(p.name for p in snapshots.iterdir()) == [
        "test_created.genguard",
        "test_edited.genguard",
        "test_recorded_in_one_process.genguard",
        "test_verified.genguard",
    ]
    assert json.loads((snapshots / "test_edited.genguard").read_text()) == edited
