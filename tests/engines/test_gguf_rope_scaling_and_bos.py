"""The GGUF metadata checks llama.cpp bug reports called for, on the real chat model (SmolLM2-135M-Instruct): rope
scaling the config does not have, or that the GGUF lacks (Llama 3.1's, llama.cpp #8676), and a BOS that llama.cpp
adds and transformers does not (the double BOS of llama-cpp-python #1501). Each bug copy of the converter's F32 file
is written with gguf-py's own code (gguf_new_metadata's copy, gguf_set_metadata)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from gguf_support import with_keys

from pytest_genguard.core.compare import compare
from pytest_genguard.core.verdict import Verdict


def _rope(config: Any, **parameters: Any) -> Any:
    """A copy of `config` with rope parameters `parameters` (the rope base kept)."""
    out = copy.deepcopy(config)
    out.rope_parameters = {"rope_theta": 100000.0, **parameters}
    return out


@pytest.fixture(scope="module")
def linear_x4(f32_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The F32 file with linear rope scaling x4 in its metadata (the config has none)."""
    import gguf

    keys = {
        "llama.rope.scaling.type": (gguf.GGUFValueType.STRING, "linear"),
        "llama.rope.scaling.factor": (gguf.GGUFValueType.FLOAT32, 4.0),
    }
    return with_keys(f32_gguf, tmp_path_factory.mktemp("rope-scaling") / "linear-x4.gguf", keys)


def test_rope_scaling_the_config_does_not_have_is_named_and_a_regression(
    folder: Path, hf: tuple[Any, Any], reference: Any, linear_x4: Path, genguard_engine: Any
) -> None:
    from pytest_genguard.engines.gguf_conformance import metadata_mismatches

    named = [str(m) for m in metadata_mismatches(linear_x4, hf[0].config)]
    assert named == [
        "metadata: llama.rope.scaling.factor: expected 1, no scaling (config rope_type 'default'), the GGUF has 4.0, "
        "linear"
    ]
    # llama.cpp applies it: positions divided by 4, a regression under the float32 rule (f32 KV cache).
    trace = genguard_engine("llama_cpp", kv_cache="f32").record(folder, reference=reference, converted=linear_x4)
    comparison = compare(reference, trace)
    assert comparison.verdict is Verdict.REGRESSION, str(comparison)


def test_rope_scaling_the_gguf_lacks_or_gets_wrong_is_named(
    hf: tuple[Any, Any], f32_gguf: Path, linear_x4: Path, tmp_path: Path
) -> None:
    from gguf import GGUFValueType

    from pytest_genguard.engines.gguf_conformance import metadata_mismatches
    from pytest_genguard.hf.smollm2 import gguf_path

    FLOAT32, STRING = GGUFValueType.FLOAT32, GGUFValueType.STRING

    config = hf[0].config
    linear = _rope(config, rope_type="linear", factor=4.0)
    assert metadata_mismatches(linear_x4, linear) == []  # the same scaling on both sides
    # No keys: llama.cpp reads linear scaling by a factor of 1, none.
    assert [(m.name, m.actual) for m in metadata_mismatches(f32_gguf, linear)] == [
        ("llama.rope.scaling.factor", "no such key (llama.cpp: 1, no scaling)")
    ]
    assert [m.expected for m in metadata_mismatches(linear_x4, _rope(config, rope_type="linear", factor=2.0))] == [
        "2.0 (config rope_type 'linear')"
    ]
    yarn = _rope(config, rope_type="yarn", factor=4.0, original_max_position_embeddings=2048)
    assert [m.name for m in metadata_mismatches(linear_x4, yarn)] == [
        "llama.rope.scaling.type",
        "llama.rope.scaling.original_context_length",
    ]
    # The old key llama.cpp still reads when rope.scaling.factor is missing; type none never scales.
    old_key = with_keys(gguf_path(), tmp_path / "scale-linear.gguf", {"llama.rope.scale_linear": (FLOAT32, 4.0)})
    assert [m.name for m in metadata_mismatches(old_key, config)] == ["llama.rope.scale_linear"]
    unscaled = with_keys(linear_x4, tmp_path / "none.gguf", {"llama.rope.scaling.type": (STRING, "none")})
    assert metadata_mismatches(unscaled, config) == []
    # Llama 3.1's scaling is a tensor of per-frequency factors (rope_freqs.weight), not metadata keys.
    llama3 = _rope(config, rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0)
    llama3.rope_parameters["original_max_position_embeddings"] = 8192
    (missing,) = metadata_mismatches(f32_gguf, llama3)
    assert (missing.name, missing.expected, missing.actual) == (
        "rope_freqs.weight",
        "32 llama3 factors (config rope_type 'llama3')",
        "none",
    )


def test_the_llama3_factors_are_transformers_own(hf: tuple[Any, Any]) -> None:
    import torch
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    from pytest_genguard.engines.gguf_conformance import _llama3_rope_factors

    config = hf[0].config
    llama3 = _rope(config, rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0)
    llama3.rope_parameters["original_max_position_embeddings"] = 1024  # short enough to put frequencies in each band
    scaled, _ = ROPE_INIT_FUNCTIONS["llama3"](llama3, torch.device("cpu"))
    dim = config.hidden_size // config.num_attention_heads
    plain = 1.0 / (100000.0 ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    factors = _llama3_rope_factors(llama3)
    assert factors is not None
    assert len({round(f, 3) for f in factors}) > 3  # 1, 8 and the smooth band between
    assert torch.allclose(torch.tensor(factors, dtype=torch.float64), plain / scaled.double(), rtol=1e-5)
    assert _llama3_rope_factors(config) is None


def test_a_gguf_that_adds_a_bos_is_named_by_the_bos_eos_check(
    hf: tuple[Any, Any], reference: Any, f32_gguf: Path, edits: Any
) -> None:
    import gguf

    from pytest_genguard.engines.gguf_conformance import metadata_mismatches, tokenizer_mismatches

    field = gguf.GGUFReader(str(f32_gguf)).get_field("tokenizer.ggml.add_bos_token")
    assert field is not None and field.contents() is False  # SmolLM2's tokenizer adds no BOS; the converter agrees
    bad = edits(f32_gguf, "gguf_set_metadata", "tokenizer.ggml.add_bos_token", "1")
    model, tokenizer = hf
    mismatches = tokenizer_mismatches(bad, tokenizer, [reference])
    added = [str(m) for m in mismatches if m.kind == "special tokens"]
    assert added == [
        "special tokens: tokens added to 'Hello world' (BOS/EOS handling): expected [19556, 905] (2 tokens) "
        "(tokenizer), the GGUF has [1, 19556, 905] (3 tokens)"
    ]
    # The plain-text snapshot prompt is tokenized with the special tokens added: llama.cpp's ids start with a BOS.
    assert [m.name.rsplit(" (", 1)[1] for m in mismatches if m.kind == "tokenizer"] == ["snapshot prompt 2)"]
    assert metadata_mismatches(bad, model.config) == []
