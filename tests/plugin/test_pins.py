"""Pinned fine-tuned weights: `--snapshot-update` trains once and pins, plain runs load the pin (no training, the
same weights everywhere), a missing pin trains here with a warning, a broken pin is an error naming the file and is
never silently replaced, `--genguard-rebuild` re-pins once per run, xdist workers write one pin."""

from __future__ import annotations

import importlib
import json
import os
import stat
from pathlib import Path

import pytest

# pytester's in-process runs drop modules first imported inside them, and torch cannot be imported twice in a process:
# import here what the inner runs use.
import safetensors.torch  # noqa: F401
import torch
from transformers import Seq2SeqTrainer, Trainer  # noqa: F401

import pytest_genguard.hf.recorder  # noqa: F401
from pytest_genguard import PinError
from pytest_genguard.hf.pins import PIN_MANIFEST, PinContent, read_pin, write_pin

finetune_module = importlib.import_module("pytest_genguard.hf.finetune")

TESTS = """
import json, os
from pathlib import Path

from pytest_genguard.hf.weights_hash import weights_hash


def test_model(genguard_finetune):
    tuned = genguard_finetune("gpt2", steps=2)
    out = Path(os.environ["GENGUARD_TEST_OUT"]) / (os.environ.get("PYTEST_XDIST_WORKER", "main") + ".json")
    out.write_text(json.dumps({
        "pin": None if tuned.pin is None else str(tuned.pin),
        "from_cache": tuned.from_cache,
        "weights": weights_hash(tuned.model),
        "recipe": tuned.fingerprint.recipe,
    }))
"""

QUIET = ("-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:benchmark", "-p", "no:anyio")


def _result(out: Path, name: str = "main") -> dict[str, object]:
    path = out / f"{name}.json"
    data: dict[str, object] = json.loads(path.read_text())
    path.unlink()
    return data


def _pin(pytester: pytest.Pytester) -> Path:
    (folder,) = (pytester.path / "__genguard_pins__").iterdir()
    return folder


def _trained_entries(pytester: pytest.Pytester) -> list[Path]:
    models = pytester.path / "models"
    return [p for p in models.iterdir() if p.is_dir() and not p.name.startswith(".")] if models.exists() else []


def test_snapshot_update_pins_the_weights_and_a_plain_run_loads_them_without_training(
    pytester: pytest.Pytester, project: Path
) -> None:
    pytester.runpytest(*QUIET, "--snapshot-update").assert_outcomes(passed=1)
    written = _result(project)
    folder = _pin(pytester)
    assert written["pin"] == str(folder)
    assert folder.name == f"gpt2-{str(written['recipe'])[:16]}"
    assert sorted(p.name for p in folder.iterdir()) == ["history.json", "model.safetensors", PIN_MANIFEST]
    manifest = json.loads((folder / PIN_MANIFEST).read_text())
    assert manifest["recipe"] == written["recipe"]
    assert manifest["fingerprint"]["weights_hash"] == written["weights"]
    assert manifest["recipe_inputs"]["training"][0] == 2  # steps, readable
    assert manifest["trained_in"]["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE((folder / "model.safetensors").stat().st_mode) == 0o666 & ~mask  # the user's file, not 0600
    # Plain run, empty per-machine cache: the pin is loaded, nothing is trained.
    for entry in (pytester.path / "models").iterdir():
        if entry.is_dir():
            import shutil

            shutil.rmtree(entry)
    pytester.runpytest(*QUIET).assert_outcomes(passed=1)
    loaded = _result(project)
    assert loaded == {**written, "from_cache": True}
    assert _trained_entries(pytester) == []


def test_a_missing_pin_trains_here_with_a_warning_naming_the_fix(pytester: pytest.Pytester, project: Path) -> None:
    result = pytester.runpytest(*QUIET, "-W", "default")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*test_models.py:*: GenguardPinWarning: no pinned weights for genguard_finetune('gpt2') (recipe *) in "
            f"{pytester.path}/__genguard_pins__/gpt2-*: trained on this machine instead*pytest --snapshot-update*"
        ]
    )
    assert _result(project)["pin"] is None
    assert not (pytester.path / "__genguard_pins__").exists()  # a plain run writes nothing the user owns
    assert len(_trained_entries(pytester)) == 1


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda f: (f / "model.safetensors").write_bytes(b"\0" * 100), "model.safetensors does not match its sha256"),
        (lambda f: (f / PIN_MANIFEST).unlink(), f"{PIN_MANIFEST} is missing"),
        (lambda f: (f / PIN_MANIFEST).write_text("{not json"), f"{PIN_MANIFEST} is unreadable"),
        (lambda f: (f / "history.json").unlink(), "history.json is missing"),
    ],
    ids=["weights-modified", "manifest-missing", "manifest-garbage", "history-missing"],
)
def test_a_broken_pin_is_an_error_naming_it_and_is_never_replaced_by_snapshot_update(
    pytester: pytest.Pytester, project: Path, damage: object, message: str
) -> None:
    pytester.runpytest(*QUIET, "--snapshot-update").assert_outcomes(passed=1)
    good = _result(project)
    folder = _pin(pytester)
    damage(folder)  # type: ignore[operator]
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    for args in ((), ("--snapshot-update",)):
        result = pytester.runpytest(*QUIET, *args)
        result.assert_outcomes(failed=1)
        result.stdout.fnmatch_lines([f"*PinError: pinned weights {folder}: {message}*pytest --genguard-rebuild*"])
        assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    # --genguard-rebuild re-pins it: the same recipe trains to the same weights on this machine.
    pytester.runpytest(*QUIET, "--genguard-rebuild").assert_outcomes(passed=1)
    assert _result(project)["weights"] == good["weights"]
    assert read_pin(folder, str(good["recipe"])) is not None


def test_rebuild_re_pins_once_per_run_even_across_xdist_workers(pytester: pytest.Pytester, project: Path) -> None:
    pytester.runpytest(*QUIET, "--snapshot-update").assert_outcomes(passed=1)
    first_run = json.loads((_pin(pytester) / PIN_MANIFEST).read_text())["run_id"]
    _result(project)
    args = ("-p", "xdist", "-n", "2", "--dist", "each", "--genguard-rebuild")
    pytester.runpytest_subprocess(*QUIET, *args).assert_outcomes(passed=2)
    manifest = json.loads((_pin(pytester) / PIN_MANIFEST).read_text())
    assert manifest["run_id"] != first_run  # re-pinned by this run ...
    workers = [_result(project, "gw0"), _result(project, "gw1")]
    assert {w["pin"] for w in workers} == {str(_pin(pytester))}
    assert sorted(bool(w["from_cache"]) for w in workers) == [False, True]  # ... once: the other worker loaded it
    assert len({w["weights"] for w in workers}) == 1


def test_xdist_workers_asking_for_a_missing_pin_write_it_once(pytester: pytest.Pytester, project: Path) -> None:
    args = ("-p", "xdist", "-n", "2", "--dist", "each", "--snapshot-update")
    pytester.runpytest_subprocess(*QUIET, *args).assert_outcomes(passed=2)
    workers = [_result(project, "gw0"), _result(project, "gw1")]
    assert sorted(bool(w["from_cache"]) for w in workers) == [False, True]
    assert len({w["weights"] for w in workers}) == 1
    assert [p.name for p in (pytester.path / "__genguard_pins__").iterdir()] == [_pin(pytester).name]


def test_the_pin_dir_ini_option_moves_the_pins(pytester: pytest.Pytester, project: Path) -> None:
    pytester.makeini("[pytest]\ngenguard_cache_dir = models\ngenguard_pin_dir = tests/pins\n")
    pytester.runpytest(*QUIET, "--snapshot-update").assert_outcomes(passed=1)
    assert Path(str(_result(project)["pin"])).parent == pytester.path / "tests" / "pins"


def _content(recipe: str) -> PinContent:
    return PinContent("gpt2", recipe, {}, {"weights_hash": "w"}, {}, 1.0, "run")


def test_a_pin_is_written_whole_or_not_at_all(tmp_path: Path) -> None:
    folder = tmp_path / "pins" / "gpt2-abc"

    def half(tmp: Path) -> None:
        (tmp / "model.safetensors").write_bytes(b"weights")
        raise KeyboardInterrupt  # killed while writing

    with pytest.raises(KeyboardInterrupt):
        write_pin(folder, _content("abc"), half)
    assert list((tmp_path / "pins").iterdir()) == []  # no pin, no temporary folder left behind

    def whole(tmp: Path) -> None:
        (tmp / "model.safetensors").write_bytes(b"weights")
        (tmp / "history.json").write_text("{}")

    write_pin(folder, _content("abc"), whole)
    assert read_pin(folder, "abc") is not None
    with pytest.raises(PinError, match="is for recipe abc, not other"):
        read_pin(folder, "other")
    # Replacing a pin that is there: killed halfway, the old pin stays whole.
    with pytest.raises(KeyboardInterrupt):
        write_pin(folder, _content("abc"), half)
    assert read_pin(folder, "abc") is not None
    assert [p.name for p in (tmp_path / "pins").iterdir()] == ["gpt2-abc"]


def test_finetune_outside_pytest_pins_with_pin_dir(tmp_path: Path) -> None:
    made = finetune_module.finetune("gpt2", steps=2, cache_dir=tmp_path / "cache", pin_dir=tmp_path / "pins")
    assert made.pin is not None and made.pin.parent == tmp_path / "pins"
    again = finetune_module.finetune("gpt2", steps=2, cache_dir=tmp_path / "other-cache", pin_dir=tmp_path / "pins")
    assert again.pin == made.pin and again.from_cache
    assert again.fingerprint.weights_hash == made.fingerprint.weights_hash
    assert not (tmp_path / "other-cache").exists() or not any(
        p.is_dir() and not p.name.startswith(".") for p in (tmp_path / "other-cache").iterdir()
    )
    with pytest.raises(ValueError, match=r"finetune\(pin='always'\)"):
        finetune_module.finetune("gpt2", steps=2, pin_dir=tmp_path / "pins", pin="always")  # type: ignore[arg-type]
