"""Quantized models can be recorded and verified, and are fingerprinted by their quantized weights (another model than
the float one, the same model when quantized twice): torch's own `quantize_dynamic` (int8 Linears whose `weight` is a
method and whose weights are packed) and torchao's int8 weight-only `Int8Tensor` through transformers' TorchAoConfig
(a tensor subclass without bytes of its own; the ``quant`` extra: skipped saying so where it is missing)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import quantizers as q
import torch

from pytest_genguard.core.errors import VerifyFallbackWarning
from pytest_genguard.core.verdict import Verdict
from pytest_genguard.hf.fingerprint import model_fingerprint
from pytest_genguard.hf.record import record
from pytest_genguard.hf.teacher import per_call_quantization, teacher_force
from pytest_genguard.hf.tiny import tiny_model, tiny_tokenizer
from pytest_genguard.hf.verify import verify
from pytest_genguard.hf.weights_hash import weights_hash

pytestmark = pytest.mark.usefixtures("one_thread")  # (tests/hf/conftest.py)

PROMPTS = ["the quick brown fox", "once upon a time"]


@pytest.fixture(scope="module")
def llama() -> Any:
    return tiny_model("llama")


def test_record_works_on_a_dynamically_quantized_model(llama: Any) -> None:
    quantized = q.dynamic_int8(llama)
    assert callable(quantized.lm_head.weight)  # the head is a DynamicQuantizedLinear: what record() read as a tensor
    trace = record(quantized, tiny_tokenizer(), PROMPTS, max_new_tokens=6)
    assert [len(p.steps) for p in trace] == [6, 6]
    assert trace.model is not None and trace.model.dtype == "float32"
    assert trace != record(llama, tiny_tokenizer(), PROMPTS, max_new_tokens=6)  # int8 moves the logprobs
    with pytest.raises(ValueError, match="top_k=769 alternatives per step, but the model scores 768 tokens"):
        record(quantized, tiny_tokenizer(), PROMPTS, max_new_tokens=2, top_k=769)


def test_a_quantized_copys_fingerprint_differs_from_the_float_models_and_is_stable_across_quantizations(
    llama: Any,
) -> None:
    float_print = model_fingerprint(llama)
    one, two = model_fingerprint(q.dynamic_int8(llama)), model_fingerprint(q.dynamic_int8(llama))
    assert one.weights_hash == two.weights_hash != float_print.weights_hash
    assert one == two
    # The packed weights are counted: the same number of weights as the float model (its head is not tied).
    assert one.num_parameters == float_print.num_parameters


def test_the_weights_hash_reads_the_packed_int8_weights_and_their_scale(llama: Any) -> None:
    quantized = q.dynamic_int8(llama)
    before = weights_hash(quantized)
    head = quantized.lm_head
    weight, bias = head.weight(), head.bias()
    codes = weight.int_repr().clone()
    codes[0, 0] += 1  # one int8 step of one weight
    moved = torch._make_per_tensor_quantized_tensor(codes, weight.q_scale(), weight.q_zero_point())
    head.set_weight_bias(moved, bias)
    one_step = weights_hash(quantized)  # hashed anew each call: packed weights cannot be watched
    head.set_weight_bias(torch._make_per_tensor_quantized_tensor(weight.int_repr(), weight.q_scale() * 2, 0), bias)
    rescaled = weights_hash(quantized)  # the same integers, another scale
    assert len({before, one_step, rescaled}) == 3
    head.set_weight_bias(weight, bias)
    assert weights_hash(quantized) == before


def test_verify_re_generates_a_dynamically_quantized_model_whose_teacher_forcing_cannot_match(llama: Any) -> None:
    quantized = q.dynamic_int8(llama)
    trace = record(quantized, tiny_tokenizer(), PROMPTS, max_new_tokens=6)
    # Why: its activations are quantized per call, so one pass over the whole path is not generate()'s step by step.
    assert teacher_force(quantized, tiny_tokenizer(), trace) != trace
    assert per_call_quantization(llama) is None
    reason = per_call_quantization(quantized)
    assert reason is not None and "torch.ao.nn.quantized.dynamic" in reason and "quantize_dynamic" in reason
    with pytest.warns(VerifyFallbackWarning, match="dynamically quantized modules"):
        result = verify(quantized, tiny_tokenizer(), trace)
    assert result.verdict is Verdict.IDENTICAL and result.regenerated
    float_trace = record(llama, tiny_tokenizer(), PROMPTS, max_new_tokens=6)
    with pytest.warns(VerifyFallbackWarning):  # negative control: the float model's trace is not the int8 model's
        assert verify(quantized, tiny_tokenizer(), float_trace).verdict is Verdict.REGRESSION


def _torchao_int8(folder: Path) -> Any:
    pytest.importorskip("torchao", reason="torchao's Int8Tensor needs the quant extra: pip install -e '.[quant]'")
    return q.torchao_int8(folder)


@pytest.fixture(scope="module")
def llama_folder(llama: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("llama")
    llama.save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    return folder


def test_record_works_on_a_torchao_int8_model_and_takes_generates_own_path(llama_folder: Path) -> None:
    model = _torchao_int8(llama_folder)
    assert type(model.model.layers[0].self_attn.q_proj.weight).__name__ == "Int8Tensor"
    tokenizer = tiny_tokenizer()
    trace = record(model, tokenizer, PROMPTS[:1], max_new_tokens=6)
    # generate() itself runs on Int8Tensor weights: what failed was the weights hash viewing its bytes (aten.view)
    plain = model.generate(**tokenizer(PROMPTS[:1], return_tensors="pt"), max_new_tokens=6, do_sample=False)
    assert list(trace[0].token_ids) == plain[0, len(trace[0].prompt_ids) :].tolist()
    assert verify(model, tokenizer, trace).ok


def test_a_torchao_copys_fingerprint_reads_its_int8_data_and_scales(llama: Any, llama_folder: Path) -> None:
    one, two = _torchao_int8(llama_folder), _torchao_int8(llama_folder)
    assert model_fingerprint(one).weights_hash == model_fingerprint(two).weights_hash
    assert model_fingerprint(one).weights_hash != model_fingerprint(llama).weights_hash
    before = weights_hash(one)
    weight = one.model.layers[0].mlp.down_proj.weight
    with torch.no_grad():
        weight.qdata[0, 0] += 1  # one int8 step of one weight, inside the tensor subclass
    assert weights_hash(one) != before
    with torch.no_grad():
        weight.qdata[0, 0] -= 1
        weight.scale[0] *= 2  # the same integers, another scale
    assert weights_hash(one) != before
