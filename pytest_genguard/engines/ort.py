"""ONNX Runtime (``pip install "/path/to/pytest-genguard[onnxruntime]"``, from a clone): the model exported with
`torch.onnx.export` (no KV cache: every call scores a whole sequence, which is all teacher forcing needs), run by an
`InferenceSession` on the CPU in float32.

The export feeds `position_ids` and an all-ones attention mask as the graph's inputs: without the mask transformers 5
looks for packed sequences with `aten::diff`, which the TorchScript exporter cannot export, and traced positions
could be baked in as constants. Each sequence is run on its own (batch 1, no padding).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy
import onnxruntime

from pytest_genguard.engines.base import Backend, Logits

if TYPE_CHECKING:
    import torch

__all__ = ["MODEL_FILE", "backend", "convert", "load"]

MODEL_FILE = "model.onnx"


def _wrapped(model: Any) -> torch.nn.Module:
    import torch

    class Logits(torch.nn.Module):
        """The causal LM as a function of ids and positions, returning only the logits."""

        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
            mask = torch.ones_like(input_ids)
            out = self.model(input_ids=input_ids, attention_mask=mask, position_ids=position_ids, use_cache=False)
            return out.logits  # type: ignore[no-any-return]

    return Logits()


def convert(model_dir: Path, out: Path) -> None:
    """`torch.onnx.export` (TorchScript exporter, dynamic batch and length) of the model saved in `model_dir`."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.eval()
    example = (torch.tensor([[0, 1, 2, 3]]), torch.arange(4)[None])
    axes = {0: "batch", 1: "sequence"}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporter's tracer and deprecation notes: about its own internals
        torch.onnx.export(
            _wrapped(model),
            example,
            str(out / MODEL_FILE),
            input_names=["input_ids", "position_ids"],
            output_names=["logits"],
            dynamic_axes={"input_ids": axes, "position_ids": axes, "logits": axes},
            dynamo=False,
        )


def load(converted: Path) -> Logits:
    """A CPU `InferenceSession` on `converted/model.onnx`, as a function from id sequences to their raw logits."""
    path = converted / MODEL_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"genguard engines: {converted} holds no {MODEL_FILE}; export the model there with torch.onnx.export "
            "(inputs input_ids and position_ids, output logits), or leave converted= unset and genguard exports it"
        )
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def logits(sequences: Sequence[Sequence[int]]) -> list[numpy.ndarray[Any, Any]]:
        out = []
        for sequence in sequences:
            ids = numpy.asarray([sequence], dtype=numpy.int64)
            positions = numpy.arange(len(sequence), dtype=numpy.int64)[None]
            result = session.run(["logits"], {"input_ids": ids, "position_ids": positions})
            out.append(numpy.asarray(result[0])[0])
        return out

    return logits


def backend() -> Backend:
    """ONNX Runtime as genguard runs it."""
    return Backend("onnxruntime", str(onnxruntime.__version__), "float32", convert, load)
