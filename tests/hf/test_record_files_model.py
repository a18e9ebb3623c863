"""record() on a model without torch parameters (optimum's ORTModelForCausalLM / OVModelForCausalLM are
GenerationMixin models whose weights live in files): fingerprinted by its files, its device from `model.device`.

optimum-onnx needs transformers < 4.58, so the stand-in below is such a model: a GenerationMixin whose network is not
a torch submodule (it holds no parameters) and whose weights are the files of the folder it was loaded from."""

from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM, GenerationMixin

import pytest_genguard
from pytest_genguard.core.compare import compare
from pytest_genguard.hf.tiny import tiny_model, tiny_tokenizer


class FilesOnlyLM(GenerationMixin):
    """Like optimum's ORT models: config, generation_config, device and model_save_dir; no parameters()."""

    def __init__(self, folder: Path) -> None:
        network = AutoModelForCausalLM.from_pretrained(folder)
        network.eval()
        self._run = network.generate  # the engine: held as a function, not as a torch submodule
        self.config = network.config
        self.generation_config = network.generation_config
        self.device = torch.device("cpu")
        self.model_save_dir = folder

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        return self._run(*args, **kwargs)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    tiny_model("gpt2").save_pretrained(tmp_path)
    return tmp_path


def test_a_model_without_parameters_is_recorded_and_fingerprinted_by_its_files(folder: Path) -> None:
    model = FilesOnlyLM(folder)
    assert not hasattr(model, "parameters")
    trace = pytest_genguard.record(model, tiny_tokenizer(), ["the quick"], max_new_tokens=8, top_k=5)
    assert trace.model is not None and trace.model.num_parameters == 0
    assert trace.environment["device"] == "cpu"
    torch_trace = pytest_genguard.record(tiny_model("gpt2"), tiny_tokenizer(), ["the quick"], max_new_tokens=8)
    assert compare(torch_trace, trace, check_fingerprints=False)  # the same decoding
    again = pytest_genguard.record(FilesOnlyLM(folder), tiny_tokenizer(), ["the quick"], max_new_tokens=8, top_k=5)
    assert again.model == trace.model  # the same files: the same fingerprint


def test_changed_weight_files_change_the_fingerprint(folder: Path) -> None:
    before = pytest_genguard.record(FilesOnlyLM(folder), tiny_tokenizer(), ["the quick"], max_new_tokens=4)
    tiny_model("gpt2", seed=1).save_pretrained(folder)  # other weights in the same folder
    after = pytest_genguard.record(FilesOnlyLM(folder), tiny_tokenizer(), ["the quick"], max_new_tokens=4)
    assert before.model is not None and after.model is not None
    assert before.model.weights_hash != after.model.weights_hash
    assert "model changed: weights" in str(compare(before, after))  # stale, as for a torch model


def test_a_model_without_parameters_or_files_is_refused(folder: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    model = FilesOnlyLM(folder)
    model.model_save_dir = tmp_path_factory.mktemp("empty")
    model.config.name_or_path = ""
    with pytest.raises(ValueError, match="has no parameters and no folder of weight files"):
        pytest_genguard.record(model, tiny_tokenizer(), ["the quick"], max_new_tokens=4)
