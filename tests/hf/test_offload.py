"""accelerate's dispatched models (`hf.offload`): the tiny llama saved with `save_pretrained` and loaded back with one
layer on "disk" (transformers reads the checkpoint's safetensors in place), dispatched by accelerate with an offload
folder (memory-mapped ``.dat`` files), or CPU-offloaded (a state dict the hooks hold) records, verifies, calibrates
and fingerprints as the same weights in memory; a model whose meta weights no hook holds is still refused."""

from __future__ import annotations

import gc
import os
import weakref
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy
import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, TrainerControl, TrainerState, TrainingArguments

from pytest_genguard.core import file_states
from pytest_genguard.core.verdict import Verdict
from pytest_genguard.hf import offload, weights_hash
from pytest_genguard.hf.environment import model_device
from pytest_genguard.hf.fidelity import calibrate, fidelity
from pytest_genguard.hf.invariants import assert_deterministic
from pytest_genguard.hf.record import record
from pytest_genguard.hf.recorder import GenerationRecorder
from pytest_genguard.hf.reference_copies import reference_copy
from pytest_genguard.hf.tiny import tiny_model
from pytest_genguard.hf.verify import verify

accelerate = pytest.importorskip("accelerate")

PROMPTS = ["hello world", "the cat sat"]
LAYER = "model.layers.1"
ON_DISK = {
    "model.embed_tokens": "cpu",
    "model.layers.0": "cpu",
    LAYER: "disk",
    "model.norm": "cpu",
    "model.rotary_emb": "cpu",
    "lm_head": "cpu",
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory, one_thread: None) -> Path:
    path = tmp_path_factory.mktemp("tiny-llama")
    tiny_model("llama").save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def in_memory(folder: Path) -> Any:
    return AutoModelForCausalLM.from_pretrained(folder)


@pytest.fixture(scope="module")
def reference(in_memory: Any, tokenizer: Any) -> Any:
    return record(in_memory, tokenizer, PROMPTS, max_new_tokens=6)


def load_offloaded(folder: Path, offload_folder: Path, device_map: dict[str, str] = ON_DISK) -> Any:
    return AutoModelForCausalLM.from_pretrained(folder, device_map=device_map, offload_folder=offload_folder)


@pytest.fixture(scope="module")
def on_disk(folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Layer 1 on "disk": read from the checkpoint's safetensors by the hooks."""
    return load_offloaded(folder, tmp_path_factory.mktemp("offload"))


@pytest.fixture
def dispatched(folder: Path, tmp_path: Path) -> Any:
    """Layer 1 dispatched by accelerate into an offload folder of memory-mapped .dat files."""
    model = AutoModelForCausalLM.from_pretrained(folder)
    return accelerate.dispatch_model(model, device_map=ON_DISK, offload_dir=tmp_path / "dat")


def models(folder: Path, tmp_path: Path) -> dict[str, Any]:
    return {
        "safetensors on disk": load_offloaded(folder, tmp_path / "off"),
        "offload folder": accelerate.dispatch_model(
            AutoModelForCausalLM.from_pretrained(folder), device_map=ON_DISK, offload_dir=tmp_path / "dat"
        ),
        "cpu offload": accelerate.cpu_offload(AutoModelForCausalLM.from_pretrained(folder), torch.device("cpu")),
        "embeddings on disk": load_offloaded(folder, tmp_path / "emb", {**ON_DISK, "model.embed_tokens": "disk"}),
    }


def test_an_offloaded_model_records_the_trace_and_identity_of_the_same_weights_in_memory(
    folder: Path, tmp_path: Path, tokenizer: Any, reference: Any
) -> None:
    for how, model in models(folder, tmp_path).items():
        assert any(p.is_meta for p in model.parameters()), how  # offloaded for real
        assert record(model, tokenizer, PROMPTS, max_new_tokens=6).to_json() == reference.to_json(), how


def test_tied_weights_on_disk_keep_their_identity_after_the_hooks_untie_them(
    tmp_path: Path, tokenizer: Any, gpt2: Any
) -> None:
    gpt2.save_pretrained(tmp_path / "gpt2")
    expected = record(AutoModelForCausalLM.from_pretrained(tmp_path / "gpt2"), tokenizer, PROMPTS, max_new_tokens=4)
    device_map = {name: "cpu" for name in ("transformer.wpe", "transformer.drop", "transformer.h", "transformer.ln_f")}
    model = load_offloaded(
        tmp_path / "gpt2", tmp_path / "off", {**device_map, "transformer.wte": "disk", "lm_head": "disk"}
    )
    assert model.lm_head.weight is model.transformer.wte.weight  # tied, both offloaded
    first = record(model, tokenizer, PROMPTS, max_new_tokens=4)
    assert model.lm_head.weight is not model.transformer.wte.weight  # the hooks' forward untied them
    assert first.to_json() == record(model, tokenizer, PROMPTS, max_new_tokens=4).to_json() == expected.to_json()


def test_a_snapshot_recorded_in_memory_holds_against_the_offloaded_model_and_the_reverse(
    on_disk: Any, in_memory: Any, tokenizer: Any, reference: Any
) -> None:
    assert verify(on_disk, tokenizer, reference, check_fingerprints=True)
    offloaded_trace = record(on_disk, tokenizer, PROMPTS, max_new_tokens=6)
    assert verify(in_memory, tokenizer, offloaded_trace, check_fingerprints=True)


def test_inputs_go_where_the_first_layer_computes_when_its_weights_are_on_disk(
    folder: Path, tmp_path: Path, in_memory: Any
) -> None:
    model = load_offloaded(folder, tmp_path, {**ON_DISK, "model.embed_tokens": "disk"})
    assert next(model.parameters()).device.type == "meta"  # what the first parameter says
    assert model_device(model) == torch.device("cpu")  # where its hook computes
    assert model_device(in_memory) == torch.device("cpu")
    assert offload.cuda_devices(model) == []


def test_inputs_go_to_the_gpu_of_the_first_layer_of_a_model_mapped_over_several(gpt2: Any) -> None:
    # accelerate's hooks as dispatch_model leaves them on a map over cuda:1 and cuda:2 (a fake at the boundary: set,
    # not attached, so nothing moves to a GPU this machine does not have)
    model = tiny_model("llama")
    model.hf_device_map = {"model.embed_tokens": 1, "model.layers.0": 1, "model.layers.1": 2, "lm_head": "cpu"}
    model._hf_hook = SimpleNamespace(execution_device=1)  # the main device (dispatch_model's first)
    model.model.embed_tokens._hf_hook = SimpleNamespace(execution_device=torch.device("cuda", 1))
    assert model_device(model) == torch.device("cuda", 1)
    assert offload.cuda_devices(model) == [torch.device("cuda", 1), torch.device("cuda", 2)]
    model.model.embed_tokens._hf_hook = SimpleNamespace(execution_device="disk")  # no device of its own
    assert model_device(model) == torch.device("cuda", 1)  # the model's own hook: where dispatch_model computes
    del model.model.embed_tokens._hf_hook, model._hf_hook
    assert model_device(model) == torch.device("cpu")  # no hook says: the parameters' device
    assert model_device(gpt2) == torch.device("cpu") and offload.cuda_devices(gpt2) == []


class Reads:
    """Counts the offloaded weights read and how many of them were alive at once."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count, self.most_alive, self.alive = 0, 0, weakref.WeakSet[Any]()
        read = offload.Offloaded.read

        def counted(entry: offload.Offloaded) -> torch.Tensor:
            tensor = read(entry)
            self.count += 1
            self.most_alive = max(self.most_alive, len(self.alive) + 1)
            self.alive.add(tensor)
            return tensor

        monkeypatch.setattr(offload.Offloaded, "read", counted)


def edit_in_place(path: Path) -> None:
    """One element of a memory-mapped .dat file changed in place (same file, same size)."""
    data = numpy.memmap(path, dtype=numpy.float32, mode="r+")
    data[0] += 1.0
    data.flush()
    del data


def test_the_weights_hash_reads_offloaded_weights_one_at_a_time_once_per_state_of_their_files(
    dispatched: Any, tmp_path: Path, tokenizer: Any, reference: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(file_states, "RACY_NS", 0)  # the offload folder was written just now
    reads = Reads(monkeypatch)
    digest = weights_hash.weights_hash(dispatched)
    assert digest == reference.model.weights_hash
    assert reads.count == 9 and reads.most_alive == 1  # layer 1's nine weights, streamed
    gc.collect()
    assert weights_hash.weights_hash(dispatched) == digest and reads.count == 9  # the same files: not read again
    # Negative control: an offloaded weight edited in its file is another model, and the snapshot is stale.
    edit_in_place(tmp_path / "dat" / f"{LAYER}.mlp.down_proj.weight.dat")
    assert weights_hash.weights_hash(dispatched) != digest and reads.count == 18
    assert verify(dispatched, tokenizer, reference, check_fingerprints=True).verdict is Verdict.STALE


def test_a_file_written_within_the_racy_window_is_hashed_at_every_call(dispatched: Any, tmp_path: Path) -> None:
    entries = offload.offloaded(dispatched, dispatched.state_dict(keep_vars=True))
    assert len(entries) == 9 and all(e.file is not None and e.file.parent == tmp_path / "dat" for e in entries.values())
    os.utime(tmp_path / "dat" / f"{LAYER}.mlp.down_proj.weight.dat")  # written now
    assert offload.watch_key(entries.values()) is None  # a second write in the same tick would not show


def test_a_model_with_meta_weights_no_hook_holds_is_refused_and_told_from_an_offloaded_one(
    folder: Path, tmp_path: Path, tokenizer: Any
) -> None:
    with torch.device("meta"):
        empty = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder))
    with pytest.raises(
        ValueError, match=r"meta device \(shapes without data\) that no accelerate hook holds either: 21 weight\(s\)"
    ):
        record(empty, tokenizer, PROMPTS, max_new_tokens=2)
    # An offloaded model whose index lost one weight: that one weight is named.
    model = load_offloaded(folder, tmp_path)
    hook = model.get_submodule(f"{LAYER}.mlp.down_proj")._hf_hook
    del hook.weights_map.dataset.index[f"{LAYER}.mlp.down_proj.weight"]
    with pytest.raises(ValueError, match=rf"1 weight\(s\) .*\({LAYER}.mlp.down_proj.weight\)"):
        record(model, tokenizer, PROMPTS, max_new_tokens=2)


@pytest.fixture(scope="module")
def calibrated(in_memory: Any, tokenizer: Any, reference: Any) -> Any:
    return calibrate(in_memory, tokenizer, reference)


def test_calibrate_and_its_reference_copies_on_an_offloaded_model_are_those_of_the_model_in_memory(
    on_disk: Any, in_memory: Any, tokenizer: Any, reference: Any, calibrated: Any
) -> None:
    assert calibrate(on_disk, tokenizer, reference).calibration == calibrated.calibration
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    for precision in ("bf16", "int8", "int4"):
        copy = reference_copy(on_disk, precision)
        # layer 1's weights converted as they come in from the checkpoint: the same logits as the in-memory copy
        assert torch.equal(copy(ids).logits, reference_copy(in_memory, precision)(ids).logits), precision
        assert not torch.equal(copy(ids).logits, in_memory(ids).logits), precision  # converted for real
    assert torch.equal(on_disk(ids).logits, in_memory(ids).logits)  # the offloaded model itself is untouched


def test_fidelity_judges_an_offloaded_candidate_and_an_offloaded_reference(
    on_disk: Any, in_memory: Any, tokenizer: Any, calibrated: Any
) -> None:
    same = fidelity(on_disk, tokenizer, calibrated, budget="int8", reference_model=in_memory, probe=False)
    assert same.holds and same.metrics["kld_max"] == 0.0
    int4 = reference_copy(in_memory, "int4")
    judged = fidelity(int4, tokenizer, calibrated, budget={"kld_max": 1e-12}, reference_model=on_disk, probe=False)
    assert not judged.holds  # the int4 copy is told apart through the offloaded reference


def test_the_invariants_and_the_recorder_run_on_an_offloaded_model(
    on_disk: Any, in_memory: Any, tokenizer: Any, tmp_path: Path
) -> None:
    assert_deterministic(on_disk, tokenizer, PROMPTS, runs=2, max_new_tokens=4)
    traces = []
    for model in (on_disk, in_memory):
        recorder = GenerationRecorder(PROMPTS, max_new_tokens=4, tokenizer=tokenizer)
        state = TrainerState()
        state.global_step, state.is_world_process_zero = 1, True
        arguments = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none")
        recorder.on_evaluate(arguments, state, TrainerControl(), model=model)
        traces.append(recorder.history[0].trace)
    assert traces[0] == traces[1]
