"""docs/own-chat-model.md works as printed: its test file, unchanged, runs in a new project against a chat checkpoint
saved in `models/base` and a LoRA adapter saved in `models/adapter`, through the flow the page describes: record,
check, a mildly retrained adapter (the answers' snapshot stale, the retrain gate within its budget), a badly retrained
one (the gate outside its budget). On a tiny chat model made here, and on SmolLM2-135M-Instruct."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import real_model_support
import torch
from snapshot_support import run

import pytest_genguard as gg

peft = pytest.importorskip("peft", reason="the guide's adapter needs peft: pip install -e '.[adapters]'")

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "own-chat-model.md"


def guide_test_file() -> str:
    text = GUIDE.read_text(encoding="utf-8")
    found = re.findall(r"<!-- --8<-- \[start:chat-test-file\] -->\n```python\n(.*?)```\n", text, re.S)
    assert len(found) == 1, "docs/own-chat-model.md must have one chat-test-file block"
    return str(found[0])


def tiny_chat_base(folder: Path) -> None:
    """The pinned fine-tuned tiny llama with a chat template (an untrained model's flat distributions would leave a
    retrain gate nothing to measure: its recorded top-5 held 1% of the mass)."""
    from chat_support import chat_tokenizer
    from cross_kernel import PINS

    gg.finetune("llama", seed=0, pin_dir=PINS, pin="use").model.save_pretrained(folder)
    chat_tokenizer().save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    del config["genguard_recipe"]  # a user's checkpoint is identified by its weights, not genguard's recipe
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")


def smollm2_base(folder: Path) -> None:
    source = real_model_support.installed_or_skip(gg.smollm2_folder)
    folder.mkdir(parents=True)
    for file in source.iterdir():
        if file.name != "manifest.json":
            (folder / file.name).symlink_to(file)


def save_adapter(base: Path, folder: Path, *, seed: int, scale: float) -> None:
    """A LoRA adapter on the base's attention projections, its B scaled by `scale` (how far training moved it)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    torch.manual_seed(seed)
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    adapted: Any = peft.get_peft_model(model, config)
    with torch.no_grad():
        for name, parameter in adapted.named_parameters():
            if "lora_B" in name:
                parameter.mul_(scale)
    adapted.save_pretrained(folder)


@pytest.fixture(scope="module", autouse=True)
def _warm_imports() -> None:
    """What the inner runs import, loaded out here once (pytester's in-process runs drop the modules they import)."""
    import peft.tuners.lora  # noqa: F401

    tokenizer = gg.tiny_tokenizer()
    model = gg.tiny_model("gpt2")
    assert gg.verify(model, tokenizer, gg.record(model, tokenizer, ["a"], max_new_tokens=2))


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize(
    ("make_base", "scales"),
    [(tiny_chat_base, (0.1, 0.11, 3.0)), (smollm2_base, (0.02, 0.021, 1.0))],
    ids=["tiny chat model", "SmolLM2-135M-Instruct"],
)
def test_the_guide_records_checks_and_gates_a_retrained_adapter(
    pytester: pytest.Pytester, make_base: Any, scales: tuple[float, float, float]
) -> None:
    code = guide_test_file()
    (tests := pytester.path / "tests").mkdir()
    (tests / "test_chat_model.py").write_text(code, encoding="utf-8")
    base, adapter = pytester.path / "models" / "base", pytester.path / "models" / "adapter"
    make_base(base)
    first, mild, bad = scales
    save_adapter(base, adapter, seed=0, scale=first)

    run(pytester, "--snapshot-update").assert_outcomes(passed=2)
    run(pytester).assert_outcomes(passed=2)

    save_adapter(base, adapter, seed=0, scale=mild)  # a retrain that moved the adapter a little
    retrained = run(pytester)
    retrained.assert_outcomes(passed=1, failed=1)
    retrained.stdout.fnmatch_lines(["*stale: model changed: *adapter*--genguard-update-stale *::test_answers"])

    save_adapter(base, adapter, seed=1, scale=bad)  # a retrain that went elsewhere
    gate = run(pytester, "-k", "retrained")
    gate.assert_outcomes(failed=1, deselected=1)
    gate.stdout.fnmatch_lines(["*fidelity OUTSIDE budget custom: kld_*"])
