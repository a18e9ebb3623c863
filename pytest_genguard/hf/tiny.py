"""Offline tiny models and tokenizer: built from configs and shipped data, never fetched from a hub.

Snapshot tests need models that exist on every machine, build in milliseconds and are identical for the
same seed. Everything here is deterministic: the byte-level BPE tokenizer is trained from the shipped
corpus (``python -m pytest_genguard.hf.tiny`` rebuilds ``data/tokenizer.json``; a test checks that the
rebuild reproduces it), and model weights are a pure function of ``(arch, seed, overrides)``.

This is a torch-side module: ``plugin.py`` must not import it at import time.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import math
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from transformers import PretrainedConfig, PreTrainedModel, PreTrainedTokenizerFast

__all__ = [
    "ARCHS",
    "SPECIAL_TOKENS",
    "VOCAB_SIZE",
    "build_tokenizer_json",
    "corpus_texts",
    "finetune_texts",
    "is_encoder_decoder",
    "portable_uniform",
    "probe_prompts",
    "tiny_model",
    "tiny_tokenizer",
]

ARCHS: tuple[str, ...] = ("gpt2", "llama", "t5")
"""Architectures ``tiny_model`` builds: two decoder-only families with different attention/norm code
paths, and one encoder-decoder."""

SPECIAL_TOKENS: tuple[str, ...] = ("<pad>", "<s>", "</s>", "<unk>")
"""Special tokens in id order: pad=0, bos=1, eos=2, unk=3."""

VOCAB_SIZE = 768
"""Target BPE vocabulary size: big enough for whole common words, small enough for sub-1M-param models."""

_MIN_FREQUENCY = 2
_DATA_PACKAGE = "pytest_genguard"
_DATA_DIR = "data"
_TOKENIZER_FILE = "tokenizer.json"

# Shared tiny dimensions: hidden 64, feed-forward 128, 2 layers, 4 heads (head size 16).
_HIDDEN = 64
_FFN = 128
_LAYERS = 2
_HEADS = 4
_KV_HEADS = 2
_MAX_POSITIONS = 256


def _read_lines(name: str) -> list[str]:
    """Non-empty lines of a shipped data file, via importlib.resources so it works from a wheel or zip."""
    text = resources.files(_DATA_PACKAGE).joinpath(_DATA_DIR).joinpath(name).read_text(encoding="utf-8")
    return [line for line in text.splitlines() if line.strip()]


def corpus_texts() -> list[str]:
    """The shipped tokenizer-training corpus, one short sentence per item (written for this project)."""
    return _read_lines("corpus.txt")


def finetune_texts() -> list[str]:
    """The eight sentences tiny models are fine-tuned on; each starts with a distinct probe prefix."""
    return _read_lines("finetune.txt")


def probe_prompts() -> list[str]:
    """Prompts that are prefixes of fine-tune sentences, so a fine-tuned model has a sharp answer."""
    return _read_lines("prompts.txt")


def build_tokenizer_json(corpus_texts: Iterable[str]) -> str:
    """Train the byte-level BPE tokenizer on ``corpus_texts`` and return its JSON.

    Byte-level so that every string encodes (no ``<unk>``) and multi-byte characters split into tokens that
    are not valid UTF-8 alone, which decoding code must handle. No post-processor adds BOS/EOS: callers
    control special tokens themselves. Training is deterministic for a given corpus.
    """
    import tokenizers

    tk: Any = tokenizers  # untyped before tokenizers 0.23: call through Any
    tokenizer = tk.Tokenizer(tk.models.BPE())
    tokenizer.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=_MIN_FREQUENCY,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(list(corpus_texts), trainer=trainer)
    return str(tokenizer.to_str(pretty=True))


def _training_texts() -> list[str]:
    return corpus_texts() + finetune_texts()


@functools.lru_cache(maxsize=1)
def _load_tokenizer() -> PreTrainedTokenizerFast:
    from transformers import PreTrainedTokenizerFast

    # Untyped constructor on some transformers versions: call through Any, annotate the result.
    tokenizer_cls: Any = PreTrainedTokenizerFast
    source = resources.files(_DATA_PACKAGE).joinpath(_DATA_DIR).joinpath(_TOKENIZER_FILE)
    with resources.as_file(source) as path:
        tokenizer: PreTrainedTokenizerFast = tokenizer_cls(
            tokenizer_file=str(path),
            bos_token=SPECIAL_TOKENS[1],
            eos_token=SPECIAL_TOKENS[2],
            pad_token=SPECIAL_TOKENS[0],
            unk_token=SPECIAL_TOKENS[3],
            padding_side="left",
            # Without this, transformers 4.57 returns token_type_ids, which generate() rejects.
            model_input_names=["input_ids", "attention_mask"],
            # Decoding must round-trip text exactly on every transformers version.
            clean_up_tokenization_spaces=False,
        )
    return tokenizer


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """The shipped tiny tokenizer (left padding, pad/bos/eos/unk = 0/1/2/3).

    Loaded once per process; each call returns a fresh copy so callers may change ``padding_side`` or add
    tokens without affecting anyone else.
    """
    return copy.deepcopy(_load_tokenizer())


def is_encoder_decoder(model: PreTrainedModel) -> bool:
    """Whether ``model`` is encoder-decoder (e.g. T5): prompts then feed the encoder, not the output."""
    return bool(getattr(model.config, "is_encoder_decoder", False))


def _resolve_dtype(dtype: torch.dtype | str | None) -> torch.dtype | None:
    import torch

    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    resolved = getattr(torch, dtype.removeprefix("torch."), None)
    if not isinstance(resolved, torch.dtype) or not resolved.is_floating_point:
        raise ValueError(
            f"tiny_model(dtype={dtype!r}): not a torch floating-point dtype; "
            "use e.g. torch.float32, 'float16' or 'bfloat16'"
        )
    return resolved


def _config(arch: str, overrides: dict[str, Any]) -> PretrainedConfig:
    """The tiny config for ``arch``, with ``overrides`` checked against the config class's attributes."""
    config_cls, kwargs = _config_arguments(arch, overrides)
    return config_cls(**kwargs)


def config_arguments(arch: str) -> dict[str, Any]:
    """The explicit arguments of ``arch``'s tiny config: what defines the model whatever the library's defaults."""
    return dict(_config_arguments(arch, {})[1])


def _config_arguments(arch: str, overrides: dict[str, Any]) -> tuple[type[PretrainedConfig], dict[str, Any]]:
    # Each config is imported only for its own arch: a process that builds a gpt2 has no use for the llama and t5
    # packages (benchmarks/finetune_startup.py measures what a fresh process pays).
    tok = _load_tokenizer()
    ids: dict[str, Any] = {
        "vocab_size": len(tok),
        "pad_token_id": tok.pad_token_id,
        "bos_token_id": tok.bos_token_id,
        "eos_token_id": tok.eos_token_id,
    }
    config_cls: type[PretrainedConfig]
    # Dropout stays at each config's default: negative-control tests need train/eval mode to matter.
    if arch == "gpt2":
        from transformers import GPT2Config

        config_cls = GPT2Config
        base = {
            "n_embd": _HIDDEN,
            "n_inner": _FFN,
            "n_layer": _LAYERS,
            "n_head": _HEADS,
            "n_positions": _MAX_POSITIONS,
        }
    elif arch == "llama":
        from transformers import LlamaConfig

        config_cls = LlamaConfig
        base = {
            "hidden_size": _HIDDEN,
            "intermediate_size": _FFN,
            "num_hidden_layers": _LAYERS,
            "num_attention_heads": _HEADS,
            "num_key_value_heads": _KV_HEADS,
            "max_position_embeddings": _MAX_POSITIONS,
        }
    else:  # t5: relative position buckets, so there is no max-positions setting
        from transformers import T5Config

        config_cls = T5Config
        base = {
            "d_model": _HIDDEN,
            "d_ff": _FFN,
            "d_kv": _HIDDEN // _HEADS,
            "num_layers": _LAYERS,
            "num_decoder_layers": _LAYERS,
            "num_heads": _HEADS,
            "decoder_start_token_id": tok.pad_token_id,
        }
    kwargs: dict[str, Any] = {**ids, **base}
    if overrides:
        defaults = config_cls()
        aliases: dict[str, str] = dict(getattr(config_cls, "attribute_map", {}))
        for key, value in overrides.items():
            if not hasattr(defaults, key) and key not in kwargs:
                raise TypeError(
                    f"tiny_model({arch!r}): unknown config override {key!r}; "
                    f"pass attributes of {config_cls.__name__} (e.g. {', '.join(sorted(base))})"
                )
            kwargs[aliases.get(key, key)] = value
    return config_cls, kwargs


def tiny_model(
    arch: str,
    seed: int = 0,
    *,
    dtype: torch.dtype | str | None = None,
    attn_implementation: str | None = None,
    **config_overrides: Any,
) -> PreTrainedModel:
    """A randomly initialised tiny model (<1M parameters) that matches ``tiny_tokenizer()``, in eval mode.

    Weights are a pure function of ``(arch, seed, config_overrides)``, bitwise identical on every machine, CPU
    kernel set and transformers version: every random weight is drawn from an integer hash of ``(seed, parameter
    name, index)`` (see `_reinitialise`), never from torch's vectorised ``normal_``, whose values depend on the CPU's
    kernels. The caller's RNG state is untouched and CUDA is never initialised here. ``dtype`` casts after
    construction (transformers 4.57 and 5.x spell the constructor argument differently); ``attn_implementation``
    is ``"eager"``, ``"sdpa"`` or another implementation transformers supports for the arch.
    """
    if arch not in ARCHS:
        raise ValueError(f"tiny_model(arch={arch!r}): unknown arch; valid archs are {', '.join(ARCHS)}")
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM

    torch_dtype = _resolve_dtype(dtype)
    config = _config(arch, config_overrides)
    # from_config()/eval() are untyped on some transformers versions: call through Any.
    auto: Any = AutoModelForSeq2SeqLM if arch == "t5" else AutoModelForCausalLM
    extra: dict[str, Any] = {}
    if attn_implementation is not None:
        extra["attn_implementation"] = attn_implementation
    # Seed only the CPU generator: torch.manual_seed would also (lazily) seed CUDA, changing the
    # caller's CUDA RNG. Building under torch.device("cpu") keeps init off any default device.
    with torch.random.fork_rng(devices=[]), torch.device("cpu"):
        torch.default_generator.manual_seed(seed)
        built: Any = auto.from_config(config, **extra)
    _reinitialise(built, arch, seed)
    if torch_dtype is not None:
        built = built.to(torch_dtype)
    built.eval()
    # Explicit ids, so generate() never falls back to "setting pad_token_id to eos_token_id".
    gen = built.generation_config
    gen.pad_token_id = config.pad_token_id
    gen.bos_token_id = getattr(config, "bos_token_id", None)
    gen.eos_token_id = config.eos_token_id
    if arch == "t5":
        gen.decoder_start_token_id = config.pad_token_id
    model: PreTrainedModel = built
    return model


# ---------------------------------------------------------------------------------------------------- init

_GOLDEN = 0x9E3779B97F4A7C15


def portable_uniform(seed: int, name: str, count: int) -> Any:
    """``count`` float64 values uniform in [0, 1), a pure function of ``(seed, name)`` on every machine.

    SplitMix64 over a counter, in numpy's wrapping uint64 arithmetic, top 53 bits scaled by 2**-53: integer
    operations and one exact scaling, so no CPU kernel, libm or library version can change a bit (torch's
    ``normal_`` draws other values under its AVX2 and scalar kernels; numpy's Generator promises no stream
    stability across releases).
    """
    import numpy as np

    start = int.from_bytes(hashlib.sha256(f"{seed}:{name}".encode()).digest()[:8], "little")
    with np.errstate(over="ignore"):
        z = np.arange(1, count + 1, dtype=np.uint64) * np.uint64(_GOLDEN) + np.uint64(start)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def _init_std(arch: str, config: PretrainedConfig, name: str) -> float | None:
    """The standard deviation transformers' own ``_init_weights`` gives weight ``name`` (None: no rule known)."""
    if arch in ("gpt2", "llama"):
        std = float(config.initializer_range)
        if arch == "gpt2" and name.endswith("c_proj.weight"):  # GPT-2's scaled residual projections
            std /= math.sqrt(2 * config.n_layer)
        return std
    factor = float(config.initializer_factor)
    d_model, d_kv, d_ff, heads = config.d_model, config.d_kv, config.d_ff, config.num_heads
    module = name.rsplit(".", 2)[-2] if name.count(".") >= 1 else name
    stds = {
        "shared": 1.0,
        "embed_tokens": 1.0,
        "lm_head": 1.0,
        "q": (d_model * d_kv) ** -0.5,
        "k": d_model**-0.5,
        "v": d_model**-0.5,
        "o": (heads * d_kv) ** -0.5,
        "relative_attention_bias": d_model**-0.5,
        "wi": d_model**-0.5,
        "wi_0": d_model**-0.5,
        "wi_1": d_model**-0.5,
        "wo": d_ff**-0.5,
    }
    return factor * stds[module] if module in stds else None


def _reinitialise(model: Any, arch: str, seed: int) -> None:
    """Replace every randomly initialised weight with portable values of the same standard deviation.

    Uniform in [-a, a] with a = std * sqrt(3) (the std transformers' normal init uses), from `portable_uniform`,
    computed in float64 and rounded once to the parameter's dtype. Constant tensors (norm weights of 1, zero
    biases) are exact everywhere and stay as built. Tied weights are set once (``named_parameters`` skips
    duplicates).
    """
    import torch

    with torch.no_grad():
        for name, param in model.named_parameters():
            flat = param.detach().reshape(-1)
            if bool((flat == flat[0]).all()):
                continue
            std = _init_std(arch, model.config, name)
            if std is None:
                raise RuntimeError(
                    f"tiny_model({arch!r}): no portable initialisation rule for parameter {name!r}; "
                    "add one in pytest_genguard.hf.tiny._init_std"
                )
            bound = std * math.sqrt(3.0)
            values = (portable_uniform(seed, name, flat.numel()) * 2.0 - 1.0) * bound
            param.copy_(torch.from_numpy(values).reshape(param.shape))


def _shipped_tokenizer_path() -> Path:
    return Path(__file__).resolve().parent.parent / _DATA_DIR / _TOKENIZER_FILE


def _main() -> None:
    """Rebuild ``data/tokenizer.json`` from the shipped corpus (run after editing corpus.txt)."""
    path = _shipped_tokenizer_path()
    path.write_text(build_tokenizer_json(_training_texts()) + "\n", encoding="utf-8")
    print(f"wrote {path}")


if __name__ == "__main__":
    _main()
