"""Candidates for the fidelity tests and benchmarks: the pinned fine-tuned tiny llama (and its save_pretrained
folder), real quantizers through transformers' quantization configs (torchao, optimum-quanto), torch's own
`quantize_dynamic`, the bf16/fp16 casts, and realistic quantization bugs as negative controls (round-to-nearest int8
with one layer's scales on the wrong axis, the output head quantized per tensor, a norm weight off by 5%, a skipped
layer). Every quantizer is imported when used: the tests skip (importorskip) where its extra is not installed."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from cross_kernel import PINS, PROMPTS

import pytest_genguard as gg
from pytest_genguard.hf.reference_copies import round_to_nearest

MAX_NEW_TOKENS = 24


def pinned_llama() -> Any:
    """The fine-tuned tiny llama pinned in fixtures/cross_kernel/pins: the same weights on every CPU."""
    return gg.finetune("llama", seed=0, pin_dir=PINS, pin="use").model.eval()


def reference_trace(model: Any) -> gg.GenerationTrace:
    """The reference the candidates are judged against: 8 prompts, 24 greedy steps, top-5."""
    return gg.record(model, gg.tiny_tokenizer(), PROMPTS, max_new_tokens=MAX_NEW_TOKENS, top_k=5)


def save(model: Any, folder: Path) -> Path:
    """`model` and the tiny tokenizer as save_pretrained writes them (what from_pretrained quantizes)."""
    model.save_pretrained(folder)
    gg.tiny_tokenizer().save_pretrained(folder)
    return folder


def from_pretrained(folder: Path, quantization_config: Any) -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(
        folder, quantization_config=quantization_config, dtype=torch.float32, device_map="cpu"
    ).eval()


def torchao_int8(folder: Path) -> Any:
    """torchao's int8 weight-only quantization through `TorchAoConfig`."""
    from torchao.quantization import Int8WeightOnlyConfig
    from transformers import TorchAoConfig

    return from_pretrained(folder, TorchAoConfig(Int8WeightOnlyConfig()))


def quanto(weights: str) -> Callable[[Path], Any]:
    """optimum-quanto's weight quantization (`"int8"`, `"int4"`) through `QuantoConfig`."""

    def load(folder: Path) -> Any:
        from transformers import QuantoConfig

        return from_pretrained(folder, QuantoConfig(weights=weights))

    return load


def dynamic_int8(model: Any) -> Any:
    """torch's own dynamic int8 quantization of every Linear."""
    return torch.ao.quantization.quantize_dynamic(copy.deepcopy(model), {torch.nn.Linear}, dtype=torch.qint8)


def cast(dtype: torch.dtype) -> Callable[[Any], Any]:
    def convert(model: Any) -> Any:
        return copy.deepcopy(model).to(dtype)

    return convert


# ---------------------------------------------------------------------------------------------------- round to nearest


def _linears(model: Any) -> list[tuple[str, torch.nn.Linear]]:
    return [(name, m) for name, m in model.named_modules() if isinstance(m, torch.nn.Linear) and name != "lm_head"]


@torch.no_grad()
def rtn(model: Any, bits: int = 8, group: int | None = None, *, wrong_axis: str | None = None) -> Any:
    """Round-to-nearest weights of every Linear but the output head (as the int8/int4 weight-only quantizers do);
    `wrong_axis` names one square layer whose dequantization applies the per-output-channel scales per input
    channel (a transposed scale vector: the classic bug)."""
    out = copy.deepcopy(model)
    for name, linear in _linears(out):
        codes, scale = round_to_nearest(linear.weight, bits, group)
        if name == wrong_axis:
            assert group is None and linear.weight.shape[0] == linear.weight.shape[1], name
            linear.weight.copy_(codes * scale.reshape(1, -1))
        else:
            linear.weight.copy_((codes * scale).reshape(linear.weight.shape))
    return out


@torch.no_grad()
def head_per_tensor(model: Any, bits: int = 4) -> Any:
    """int8 round-to-nearest, and the output head (untied from the embeddings) quantized with one scale for the
    whole tensor at `bits` bits: the head is the layer quantizers keep in higher precision."""
    out = rtn(model, 8)
    head = out.get_output_embeddings()
    weight = head.weight.detach().clone()
    codes, scale = round_to_nearest(weight.reshape(1, -1), bits, None)
    head.weight = torch.nn.Parameter((codes * scale).reshape(weight.shape))
    out.config.tie_word_embeddings = False
    return out


@torch.no_grad()
def norm_off(model: Any, factor: float = 1.05, dtype: torch.dtype = torch.bfloat16) -> Any:
    """A cast to `dtype` with one RMSNorm weight scaled by `factor` (a conversion that mixed up a norm's weight)."""
    out = copy.deepcopy(model).to(dtype)
    out.model.layers[0].post_attention_layernorm.weight.mul_(factor)
    return out


@torch.no_grad()
def skipped_layer(model: Any, bits: int = 4, group: int = 32, layer: int = 0) -> Any:
    """int4 groups of 32 where one decoder layer (the first) was dropped from the conversion: its attention and MLP
    outputs are zero (the residual stream passes the layer untouched). Dropping the last of the tiny llama's two
    layers hides inside int4's own error there (measured: docs/fidelity.md)."""
    out = rtn(model, bits, group)
    dropped = out.model.layers[layer]
    dropped.self_attn.o_proj.weight.zero_()
    dropped.mlp.down_proj.weight.zero_()
    return out
