"""Pins in the run's summary: a pin written by ``--snapshot-update`` is listed as new; a pin re-trained by
``--genguard-rebuild`` is listed with what moved, and says so when it was re-trained under another CPU kernel set than
the old one; after a run of the whole suite the pin folders no test used are listed, and deleted only with
``--snapshot-update`` when every test passed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import safetensors.torch  # noqa: F401  (pytester's in-process runs cannot import torch's extensions again)
import torch
from kernel_sets import params
from transformers import Seq2SeqTrainer, Trainer  # noqa: F401

import pytest_genguard.hf.recorder  # noqa: F401
from pytest_genguard.hf.pins import PIN_MANIFEST

TESTS = """
import os

import pytest


def test_model(genguard_finetune):
    genguard_finetune("gpt2", steps=2)


@pytest.mark.skipif(os.environ.get("GENGUARD_TEST_SECOND") != "1", reason="only when asked")
def test_second(genguard_finetune):
    genguard_finetune("gpt2", steps=3)


def test_fails_when_asked():
    assert os.environ.get("GENGUARD_TEST_FAIL") != "1"
"""

QUIET = ("-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:benchmark", "-p", "no:anyio")


def _pins(pytester: pytest.Pytester) -> list[str]:
    return sorted(p.name for p in (pytester.path / "__genguard_pins__").iterdir())


def _steps(pytester: pytest.Pytester, name: str) -> int:
    manifest = json.loads((pytester.path / "__genguard_pins__" / name / PIN_MANIFEST).read_text())
    return int(manifest["recipe_inputs"]["training"][0])


def test_a_new_pin_is_listed(pytester: pytest.Pytester, project: Path) -> None:
    result = pytester.runpytest(*QUIET, "--snapshot-update")
    result.assert_outcomes(passed=2, skipped=1)
    (name,) = _pins(pytester)
    result.stdout.fnmatch_lines(
        [
            "new pins (commit the folders with the snapshots):",
            f"  __genguard_pins__/{name} (test_models.py::test_model)",
        ]
    )


def test_rebuild_lists_the_re_pinned_pin_and_what_moved(pytester: pytest.Pytester, project: Path) -> None:
    pytester.runpytest(*QUIET, "--snapshot-update").assert_outcomes(passed=2, skipped=1)
    (name,) = _pins(pytester)
    result = pytester.runpytest(*QUIET, "--genguard-rebuild", "test_models.py::test_model")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "re-pinned weights (review and commit the folders; snapshots were recorded against the old ones):",
            f"  __genguard_pins__/{name} (test_models.py::test_model)",
            "    weights unchanged (*)",  # the same recipe on the same machine trains the same weights
        ]
    )
    assert "CPU kernel set" not in result.stdout.str()


@pytest.mark.parametrize("kernel_set", params("default"))
def test_a_pin_re_trained_under_another_cpu_kernel_set_says_so(
    pytester: pytest.Pytester, project: Path, monkeypatch: pytest.MonkeyPatch, kernel_set: str
) -> None:
    here = torch.backends.cpu.get_cpu_capability()
    if here.lower() == kernel_set:
        pytest.skip(f"this machine runs the {kernel_set} kernels anyway: nothing to compare")
    with monkeypatch.context() as env:
        env.setenv("ATEN_CPU_CAPABILITY", kernel_set)  # the pin is made as a CPU without AVX2 would make it
        pytester.runpytest_subprocess(*QUIET, "--snapshot-update").assert_outcomes(passed=2, skipped=1)
    (name,) = _pins(pytester)
    old = json.loads((pytester.path / "__genguard_pins__" / name / PIN_MANIFEST).read_text())
    assert old["trained_in"]["cpu_capability"] == kernel_set.upper()
    result = pytester.runpytest(*QUIET, "--genguard-rebuild", "test_models.py::test_model")
    result.assert_outcomes(passed=1)
    new = json.loads((pytester.path / "__genguard_pins__" / name / PIN_MANIFEST).read_text())
    old_hash, new_hash = old["fingerprint"]["weights_hash"], new["fingerprint"]["weights_hash"]
    assert old_hash != new_hash
    result.stdout.fnmatch_lines(
        [
            f"  __genguard_pins__/{name} (test_models.py::test_model)",
            f"    weights {old_hash[:8]} -> {new_hash[:8]}, max |Δ| *",
            f"    re-trained under CPU kernel set {here}, the old pin under {kernel_set.upper()}: training amplifies "
            "their rounding, so the weights moved although the recipe did not*",
        ]
    )


def test_unused_pins_are_listed_after_a_whole_run_and_deleted_only_with_snapshot_update(
    pytester: pytest.Pytester, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as env:
        env.setenv("GENGUARD_TEST_SECOND", "1")
        pytester.runpytest(*QUIET, "--snapshot-update").assert_outcomes(passed=3)
    first, second = _pins(pytester)
    used = next(n for n in (first, second) if _steps(pytester, n) == 2)  # test_model's recipe
    unused = second if used == first else first

    listed = pytester.runpytest(*QUIET)  # test_second is skipped before it asks for its pin: nothing tells its use
    listed.assert_outcomes(passed=2, skipped=1)
    listed.stdout.fnmatch_lines(
        [
            "1 pin folder no test used in this run of the whole suite:",
            f"  __genguard_pins__/{unused}",
            "delete them with: pytest --snapshot-update (or by hand: git rm -r)",
        ]
    )
    assert f"__genguard_pins__/{used}" not in listed.stdout.str()
    assert _pins(pytester) == sorted([used, unused])

    narrowed = pytester.runpytest(*QUIET, "-k", "not test_fails and not test_second")  # not the whole suite: no listing
    narrowed.assert_outcomes(passed=1)
    assert "no test used" not in narrowed.stdout.str()

    kept = pytester.runpytest(*QUIET, "--snapshot-update")  # a test was skipped: it may use the pin
    kept.assert_outcomes(passed=2, skipped=1)
    kept.stdout.fnmatch_lines(["kept: 1 test did not pass (failed, errored or skipped) and may use them; *"])
    assert _pins(pytester) == sorted([used, unused])

    pytester.makepyfile(test_models=TESTS.replace('reason="only when asked"', 'reason="x"').split("@pytest.mark")[0])
    deleted = pytester.runpytest(*QUIET, "--snapshot-update")
    deleted.assert_outcomes(passed=1)
    deleted.stdout.fnmatch_lines(
        ["deleted 1 pin folder no test used (--snapshot-update):", f"  __genguard_pins__/{unused}"]
    )
    assert _pins(pytester) == [used]


def test_a_pin_used_only_by_a_failing_test_is_not_deleted(
    pytester: pytest.Pytester, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.runpytest(*QUIET, "--snapshot-update").assert_outcomes(passed=2, skipped=1)
    (name,) = _pins(pytester)
    spare = pytester.path / "__genguard_pins__" / ("llama-" + "0" * 16)
    shutil.copytree(pytester.path / "__genguard_pins__" / name, spare)
    monkeypatch.setenv("GENGUARD_TEST_FAIL", "1")
    pytester.makepyfile(test_models=TESTS.split("@pytest.mark")[0] + "\ndef test_fails():\n    assert False\n")
    result = pytester.runpytest(*QUIET, "--snapshot-update")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [f"  __genguard_pins__/{spare.name}", "kept: 1 test did not pass (failed, errored or skipped)*"]
    )
    assert spare.exists()
