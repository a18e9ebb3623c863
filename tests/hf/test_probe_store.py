"""A file's long-probe steps stored in genguard's cache (`hf.probe_store`): read once, read back by a later run bit
for bit, and found only by everything the figures depend on (the candidate's identity, the reference's weights, the
environment, genguard's code); a damaged entry is read again, an unwritable folder warned about."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import torch
from torch_threads import threads

from pytest_genguard.core.errors import GenguardCacheWarning
from pytest_genguard.core.fidelity import StepFidelity
from pytest_genguard.hf import probe_store
from pytest_genguard.hf.cache import CacheCorrupt
from pytest_genguard.hf.long_probe import model_chunks, probe_ids, probe_steps, reference_chunks
from pytest_genguard.hf.tiny import tiny_model, tiny_tokenizer

FILE = {"gguf_sha256": "0" * 64, "kv_cache": "f16"}


def steps_of(model: torch.nn.Module, ids: list[int]) -> tuple[StepFidelity, ...]:
    """A real probe's steps: the model against a copy with its head scaled."""
    moved = copy.deepcopy(model)
    with torch.no_grad():
        moved.lm_head.weight.mul_(1.02)
    return tuple(probe_steps(reference_chunks(model, ids), model_chunks(moved)(ids), ids))


def test_steps_round_trip_through_json_bit_for_bit_infinite_and_unknown_values_included() -> None:
    step = StepFidelity(1, 2, 3, math.inf, None, 4, 5, None, 0.5, False, ((4, -0.1),), ((5, -0.2), (4, -1.7)), False)
    model = tiny_model("llama")
    ids = probe_ids(tiny_tokenizer(), model.config)
    steps = (*steps_of(model, ids), step)
    assert probe_store.steps_from_json(probe_store.steps_to_json(steps)) == steps
    with pytest.raises(CacheCorrupt, match=r"names the fields \['prompt'\], not \['prompt', 'step'"):
        probe_store.steps_from_json('{"fields": ["prompt"], "rows": [[1]]}')
    fields = probe_store.steps_to_json(steps[:1]).split('"rows"')[0]
    with pytest.raises(CacheCorrupt, match="not a probe's steps"):
        probe_store.steps_from_json(fields + '"rows": [[1, 2]]}')


@pytest.fixture
def probed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[torch.nn.Module, list[int]]:
    """A tiny llama and its probe's ids, genguard's cache in `tmp_path`."""
    monkeypatch.setenv("GENGUARD_CACHE_DIR", str(tmp_path))
    model = tiny_model("llama")
    return model, probe_ids(tiny_tokenizer(), model.config)


def test_a_probe_is_read_once_stored_and_read_back_and_its_key_names_what_moves_it(
    probed: tuple[torch.nn.Module, list[int]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, ids = probed
    reads: list[int] = []

    def read() -> tuple[StepFidelity, ...]:
        reads.append(1)
        return steps_of(model, ids)

    first = probe_store.stored_steps(model, ids, FILE, read)
    assert len(first) == len(ids) - 1 and len(reads) == 1
    assert len(list((tmp_path / "long-probe").glob(f"*/{probe_store.STEPS_FILE}"))) == 1
    assert probe_store.stored_steps(model, ids, FILE, read) == first and len(reads) == 1  # read back, not read
    # Its negative controls: another file, other reference weights, another thread count or other code are other
    # keys, and another file is read anew.
    other_file = {**FILE, "gguf_sha256": "1" * 64}
    assert probe_store.stored_steps(model, ids, other_file, read) == first and len(reads) == 2
    other = copy.deepcopy(model)
    with torch.no_grad():
        other.lm_head.weight.mul_(1.01)
    keys = {probe_store.stored_steps_key(m, ids, f) for m, f in ((model, FILE), (model, other_file), (other, FILE))}
    with threads(torch.get_num_threads() + 1):
        keys.add(probe_store.stored_steps_key(model, ids, FILE))
    monkeypatch.setattr(probe_store, "STEPS_MODULES", (*probe_store.STEPS_MODULES, "pytest_genguard.core.trace"))
    keys.add(probe_store.stored_steps_key(model, ids, FILE))
    assert len(keys) == 5


def test_a_damaged_entry_is_read_again_and_an_unwritable_folder_warned_about(
    probed: tuple[torch.nn.Module, list[int]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, ids = probed
    steps = steps_of(model, ids)
    probe_store.stored_steps(model, ids, FILE, lambda: steps)
    (stored,) = (tmp_path / "long-probe").glob(f"*/{probe_store.STEPS_FILE}")
    stored.write_text(stored.read_text(encoding="utf-8").replace("[", "[9,", 1), encoding="utf-8")
    with pytest.warns(GenguardCacheWarning, match="unusable"):
        assert probe_store.stored_steps(model, ids, FILE, lambda: steps) == steps
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder", encoding="utf-8")
    monkeypatch.setenv("GENGUARD_CACHE_DIR", str(blocker / "cache"))
    with pytest.warns(GenguardCacheWarning, match="the long probe's steps are not stored"):
        assert probe_store.stored_steps(model, ids, FILE, lambda: steps) == steps
