"""A reference copy lossy in its KV cache alone (`hf.kv_cache_copies`): its stored types round as ggml's own quantizers
do, its attention is the model's own where nothing is rounded (masks, scaling, grouped queries, sliding windows), and
its cost orders the cache types; `calibrate()` stores llama.cpp's default (kv-f16) with the whole-model conversions."""

from __future__ import annotations

import pytest
import torch
from swa_model import swa_model

from pytest_genguard import calibrate, record
from pytest_genguard.core.budget import CALIBRATIONS
from pytest_genguard.hf import kv_cache_copies
from pytest_genguard.hf.kv_cache_copies import CACHE_TYPES, kv_cache_copy, rounded
from pytest_genguard.hf.reference_copies import reference_copy
from pytest_genguard.hf.tiny import tiny_model, tiny_tokenizer


@pytest.mark.parametrize("kind", ["Q8_0", "Q4_0"])
def test_a_quantized_cache_rounds_as_ggmls_own_quantizer(kind: str) -> None:
    gguf = pytest.importorskip("gguf", reason="gguf-py holds ggml's reference quantizers (the llama_cpp extra)")
    x = torch.randn(6, 128, generator=torch.Generator().manual_seed(0))
    x[0, :32] = 0  # an all-zero block: scale 0
    x[1, 7] = 40.0  # an outlier sets its block's scale
    kind_enum = getattr(gguf.GGMLQuantizationType, kind)
    expected = gguf.quants.dequantize(gguf.quants.quantize(x.numpy(), kind_enum), kind_enum)
    assert torch.equal(rounded(x, kind.lower()), torch.from_numpy(expected))
    assert torch.equal(rounded(x, "f16"), x.half().float()) and torch.equal(rounded(x, "bf16"), x.bfloat16().float())
    assert rounded(x, "f32") is x
    with pytest.raises(ValueError, match="unknown KV cache type 'q5_1'"):
        rounded(x, "q5_1")


def test_the_hadamard_turn_is_orthonormal_and_its_own_inverse() -> None:
    for n in (64, 128, 256):
        h = kv_cache_copies._hadamard(n)
        assert torch.allclose(h @ h, torch.eye(n), atol=1e-6) and torch.equal(h, h.T)
    assert kv_cache_copies._rotations(256) == (256, 64) and kv_cache_copies._rotations(192) == (64, 64)
    assert kv_cache_copies._rotations(80) is None


@pytest.mark.parametrize("arch", ["llama", "swa"])
def test_with_nothing_rounded_the_copy_is_the_models_own_computation(
    arch: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    tokenizer = tiny_tokenizer()
    model = tiny_model("llama") if arch == "llama" else swa_model(tokenizer)
    ids = torch.tensor([tokenizer("the history of the printing press " * 6)["input_ids"][:40]])
    with torch.no_grad():
        expected = model(ids).logits
        # The copy computes attention in another order (and, for a quantized cache, turns queries and keys by an
        # orthonormal Hadamard matrix and back): float32 reordering error only, measured at most 1.7e-5 (unturned) and
        # 2.2e-5 (turned) on the sliding-window model's logits of up to 16.7 under the avx512, avx2 and default kernel
        # sets, 8-11 float32 ulps of the largest logit. 16 ulps of it is the allowance; any rounding is far beyond.
        tolerance = 16 * torch.finfo(torch.float32).eps * expected.abs().max().item()
    real_rounding = kv_cache_copies.rounded
    monkeypatch.setattr(kv_cache_copies, "rounded", lambda x, kind: x)  # every cache type stores float32 now
    monkeypatch.setattr(kv_cache_copies, "_gelu_table", lambda x: torch.nn.functional.gelu(x, approximate="tanh"))
    for kind in CACHE_TYPES:
        copy = kv_cache_copy(model, kind)
        with torch.no_grad():
            assert (copy(ids).logits - expected).abs().max().item() <= tolerance, kind
    assert model.config._attn_implementation != copy.config._attn_implementation  # the model itself untouched
    monkeypatch.setattr(kv_cache_copies, "rounded", real_rounding)  # the negative control: a cache that rounds
    with torch.no_grad():
        assert (kv_cache_copy(model, "f16")(ids).logits - expected).abs().max().item() > tolerance


def test_a_tanh_gelu_goes_through_ggmls_float16_table_and_a_silu_model_is_left_exact() -> None:
    x = torch.tensor([-12.0, -10.0, -1.2345678, 0.0, 0.3333333, 2.71828, 9.99, 10.0, 15.0])
    y = kv_cache_copies._gelu_table(x)
    assert y[0] == 0 and y[1] == 0 and y[7] == 10.0 and y[8] == 15.0  # ggml's clamps
    inside = torch.nn.functional.gelu(x[2:7].half().float(), approximate="tanh").half().float()
    assert torch.equal(y[2:7], inside) and not torch.equal(y[2:7], torch.nn.functional.gelu(x[2:7], approximate="tanh"))
    tokenizer = tiny_tokenizer()
    gelu, silu = swa_model(tokenizer), tiny_model("llama")  # Gemma 3's gelu_pytorch_tanh; Llama's SiLU
    assert kv_cache_copies.tabled_activation(gelu.config) and not kv_cache_copies.tabled_activation(silu.config)
    ids = torch.tensor([tokenizer("the history of the printing press " * 6)["input_ids"][:40]])
    with torch.no_grad():
        assert not torch.allclose(kv_cache_copy(gelu, "f32")(ids).logits, gelu(ids).logits, atol=1e-4, rtol=0)
        assert torch.allclose(kv_cache_copy(silu, "f32")(ids).logits, silu(ids).logits, atol=2e-5, rtol=0)


def test_each_cache_type_costs_more_than_the_finer_one_and_the_weights_are_the_models() -> None:
    tokenizer = tiny_tokenizer()
    model = swa_model(tokenizer)
    ids = torch.tensor([tokenizer("We hold these truths to be self-evident, " * 4)["input_ids"][:48]])
    with torch.no_grad():
        reference = torch.log_softmax(model(ids).logits.double(), -1)
        klds = {}
        for kind in ("f16", "bf16", "q8_0", "q4_0"):
            copy = reference_copy(model, f"kv-{kind}")
            assert all(torch.equal(a, b) for a, b in zip(copy.parameters(), model.parameters(), strict=True))
            candidate = torch.log_softmax(copy(ids).logits.double(), -1)
            klds[kind] = float((reference.exp() * (reference - candidate)).sum(-1).mean())
    assert 0 < klds["f16"] < klds["bf16"] < klds["q4_0"] and 0 < klds["q8_0"] < klds["q4_0"], klds


def test_calibrate_stores_the_f16_caches_cost_by_default_and_the_others_on_request() -> None:
    tokenizer = tiny_tokenizer()
    model = swa_model(tokenizer)  # head dimension 64: two q8_0 blocks (the tiny llama's 16 has no q8_0 cache)
    trace = record(model, tokenizer, ["hello"], max_new_tokens=3, top_k=5)
    figures = calibrate(model, tokenizer, trace, precisions=("kv-f16", "kv-q8_0")).calibration
    assert 0 < figures["kv-f16.kld_mean"] < figures["kv-q8_0.kld_mean"] and "kv-f16.bound.kld_mean" in figures
    assert CALIBRATIONS[-5:] == ("kv-f16", "kv-f32", "kv-bf16", "kv-q8_0", "kv-q4_0")
    with pytest.raises(ValueError, match="unknown precision 'kv-q5_1'; known: bf16, fp16, int8, int4, kv-f16"):
        calibrate(model, tokenizer, trace, precisions=("kv-q5_1",))
    with pytest.raises(ValueError, match="a quantized KV cache needs a head dimension divisible by 32, got 16"):
        calibrate(tiny_model("llama"), tokenizer, trace, precisions=("kv-q8_0",))
