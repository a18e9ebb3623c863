"""Traces of user models (no genguard recipe) recorded the same way under every transformers version, so that one
version's committed traces can be checked by another: ``fixtures/cross_version/transformers-<version>/``.

Regenerate (in a virtualenv with that transformers version): ``python tests/support/cross_version.py``.
The models are `tiny_model(arch)` (bitwise the same weights everywhere) and, for llama, the same weights loaded
through a ``config.json`` written by ``save_pretrained`` of that version, as a user's checkpoint would be.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "cross_version"
PROMPTS = ["the quick", "once upon a time"]
CASES = ("gpt2-greedy", "llama-greedy", "t5-greedy", "llama-sampled", "llama-checkpoint")


def model_for(case: str, checkpoint_config: Path | None = None) -> Any:
    """The model of `case`; "llama-checkpoint" loads its config from `checkpoint_config` (a saved config.json)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from pytest_genguard.hf.tiny import tiny_model

    arch = case.split("-")[0]
    model = tiny_model(arch)
    if case != "llama-checkpoint":
        return model
    assert checkpoint_config is not None
    with tempfile.TemporaryDirectory() as checkpoint:
        (Path(checkpoint) / "config.json").write_text(checkpoint_config.read_text())
        config = AutoConfig.from_pretrained(checkpoint)
    loaded: Any = AutoModelForCausalLM.from_config(config)
    loaded.load_state_dict(model.state_dict())
    loaded.generation_config = model.generation_config
    return loaded.eval()


def record_case(case: str, checkpoint_config: Path | None = None) -> Any:
    """What `case` records now (the settings name everything, so no version's defaults decide)."""
    from transformers import GenerationConfig

    from pytest_genguard import record, tiny_tokenizer

    model = model_for(case, checkpoint_config)
    kwargs: dict[str, Any] = {}
    if case == "llama-sampled":
        kwargs = {"seed": 0, "generation_config": GenerationConfig(do_sample=True, temperature=1.3, top_k=50)}
    return record(model, tiny_tokenizer(), PROMPTS, max_new_tokens=12, top_k=5, **kwargs)


def main() -> None:
    import transformers

    from pytest_genguard.hf.tiny import tiny_model

    folder = FIXTURES / f"transformers-{transformers.__version__}"
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tiny_model("llama").config.save_pretrained(tmp)
        (folder / "llama-config.json").write_text((Path(tmp) / "config.json").read_text())
    for case in CASES:
        trace = record_case(case, folder / "llama-config.json")
        (folder / f"{case}.json").write_text(trace.to_json())
    print(f"wrote {folder}", file=sys.stderr)


if __name__ == "__main__":
    main()
