"""Negative controls: a conversion bug in the engine's model fails as a regression at its first step."""

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from engine_support import reference

from pytest_genguard.core.compare import compare
from pytest_genguard.core.comparison import environment_line
from pytest_genguard.core.verdict import Verdict


def _copy(converted: Path, tmp_path: Path) -> Path:
    out = tmp_path / "converted"
    shutil.copytree(converted, out)
    return out


def _assert_regressed_at_first_step(expected: Any, actual: Any, engine: str) -> None:
    result = compare(expected, actual)
    assert result.verdict is Verdict.REGRESSION, str(result)
    first = result.divergences[0]
    assert (first.prompt_index, first.step) == (0, 0), str(result)
    line = environment_line(result)
    assert line is not None and line.startswith("recorded on transformers") and f"now {engine}" in line


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_ctranslate2_with_another_layer_norm_epsilon_regresses(
    genguard_engine: Any, saved: dict[str, Path], tmp_path: Path, arch: str
) -> None:
    engine = genguard_engine("ctranslate2")
    bad = _copy(engine.convert(saved[arch]), tmp_path)
    config = json.loads((bad / "config.json").read_text())
    config["layer_norm_epsilon"] = 1e-3  # the converter wrote the model's 1e-5 (gpt2) / 1e-6 (llama)
    (bad / "config.json").write_text(json.dumps(config))
    expected = reference(arch, "greedy")
    _assert_regressed_at_first_step(
        expected, engine.record(saved[arch], reference=expected, converted=bad), "ctranslate2"
    )


@pytest.mark.parametrize(("arch", "tensor"), [("gpt2", "attn.c_attn.bias"), ("llama", "input_layernorm.weight")])
def test_onnxruntime_with_a_perturbed_tensor_regresses(
    genguard_engine: Any, saved: dict[str, Path], tmp_path: Path, arch: str, tensor: str
) -> None:
    engine = genguard_engine("onnxruntime")  # skips, naming the extra to install, where it is missing (onnx with it)
    import onnx
    from onnx import numpy_helper

    bad = _copy(engine.convert(saved[arch]), tmp_path)
    graph = onnx.load(str(bad / "model.onnx"))
    target = next(i for i in graph.graph.initializer if i.name.endswith(tensor))
    perturbed = numpy_helper.to_array(target) + 0.01  # a bias (gpt2) / norm weight (llama) off by 0.01
    target.CopyFrom(numpy_helper.from_array(perturbed, target.name))
    onnx.save(graph, str(bad / "model.onnx"))
    expected = reference(arch, "greedy")
    _assert_regressed_at_first_step(
        expected, engine.record(saved[arch], reference=expected, converted=bad), "onnxruntime"
    )
