"""README's quickstart works as printed. Its test file, unchanged, runs in a new project as
`tests/test_generation.py` against a fine-tuned model saved with `save_pretrained()` in `models/my-finetune` (the
README's `MODEL`; the examples' pinned GPT-2, so nothing trains and nothing is downloaded), through the update flow
README shows: record, check, a retrained model (stale), re-record the stale snapshots, check."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import torch
from readme_blocks import README, section
from snapshot_support import file_state, run

from pytest_genguard import finetune

PINS = README.parent / "examples" / "__genguard_pins__"
MODEL_LINE = 'MODEL = "models/my-finetune"'


def save_model(folder: Path, *, retrained: bool = False) -> None:
    """The user's fine-tune, saved as a training script saves it; `retrained` moves its final norm a little. The
    config loses genguard's recipe: a user's own model is identified by its weights (other weights: stale)."""
    tuned = finetune("gpt2", pin_dir=PINS)
    if retrained:
        with torch.no_grad():
            tuned.model.transformer.ln_f.weight.mul_(1.01)
    tuned.model.save_pretrained(folder)
    tuned.tokenizer.save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    del config["genguard_recipe"]
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")


def commands() -> list[list[str]]:
    """The pytest arguments of README's update block, one list per line, in order."""
    language, block = section("update")
    assert language == "bash"
    lines = [shlex.split(line.split("#")[0]) for line in block.splitlines() if line.strip()]
    assert all(words[0] == "pytest" for words in lines), block
    return [words[1:] for words in lines]


def test_the_readme_test_file_records_checks_and_asks_to_re_record_a_retrained_model(
    pytester: pytest.Pytester,
) -> None:
    language, code = section("test-file")
    assert language == "python"
    assert code.count(MODEL_LINE) == 1, f"README's test file must load its model from {MODEL_LINE}"
    (tests := pytester.path / "tests").mkdir()
    (tests / "test_generation.py").write_text(code, encoding="utf-8")
    save_model(pytester.path / "models" / "my-finetune")
    record, check, update_stale = commands()
    assert (record, check, update_stale) == (["--snapshot-update"], [], ["--genguard-update-stale"])

    first = run(pytester, *record)
    first.assert_outcomes(passed=3)
    snapshots = sorted((tests / "__snapshots__" / "test_generation").glob("*.genguard"))
    assert [p.stem for p in snapshots] == [
        "test_greedy_decoding",
        "test_greedy_decoding_by_teacher_forcing",
        "test_sampled_decoding",
    ]
    recorded = [file_state(p) for p in snapshots]

    run(pytester, *check).assert_outcomes(passed=3)
    assert [file_state(p) for p in snapshots] == recorded  # a check never rewrites

    save_model(pytester.path / "models" / "my-finetune", retrained=True)
    stale = run(pytester, *check)
    stale.assert_outcomes(failed=3)
    stale.stdout.fnmatch_lines(["snapshots: * 3 stale, 0 regressed*"])
    stale.stdout.fnmatch_lines(["*--genguard-update-stale*"])

    run(pytester, *update_stale).assert_outcomes(passed=3)
    assert all(file_state(p) != state for p, state in zip(snapshots, recorded, strict=True))
    run(pytester, *check).assert_outcomes(passed=3)
