"""Checks of what users pass to `record()` and `finetune()`, made before any of it reaches transformers or torch.

Left to them, bad input fails deep inside (an empty prompt: "cannot reshape tensor of 0 elements"; a prompt beyond
gpt2's context: "index out of range in self"; ``num_beams=0``: ZeroDivisionError) or not at all (``max_new_tokens=2.5``
was stored in the trace; an empty prompt in a batch recorded padding as its generation). Every check here raises a
`ValueError` whose first line names the argument, the value and the limit.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pytest_genguard.core.text import quote
from pytest_genguard.core.validation import integer, short
from pytest_genguard.hf import offload, tensor_parallel
from pytest_genguard.hf.environment import cuda_unavailable_reason
from pytest_genguard.hf.weights_hash import has_parameters, weights_folder

if TYPE_CHECKING:
    import torch
    from transformers import GenerationConfig, PreTrainedModel

__all__ = [
    "check_generate_kwargs",
    "check_generation_config",
    "check_model",
    "check_prompt_tokens",
    "check_seeded",
    "check_tokenizer",
    "check_top_k",
    "context_length",
    "torch_device",
]

# Config attributes that hold the number of positions a model can attend to, by the names architectures use.
_CONTEXT_ATTRIBUTES = ("n_positions", "max_position_embeddings", "n_ctx", "max_sequence_length", "seq_length")


def check_top_k(top_k: int, model: PreTrainedModel) -> None:
    """record()'s top_k (alternatives recorded per step) within the scores the model gives: an error rather than
    a silent clamp, so the trace records what the test asked for."""
    vocab = _scored_tokens(model)
    if isinstance(vocab, int) and top_k > vocab:
        raise ValueError(
            f"record(): top_k={top_k} alternatives per step, but the model scores {vocab} tokens; pass top_k <= "
            f"{vocab} (a sampling top-k goes in generation_config, where transformers clamps it to the vocabulary)."
        )


def _scored_tokens(model: PreTrainedModel) -> Any:
    """How many tokens the output layer scores: its `out_features` (a Linear, also torch's dynamically quantized one,
    whose `weight` is a method), else its weight's rows, else the config's `vocab_size`."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    width = getattr(head, "out_features", None)
    if isinstance(width, int):
        return width
    weight = getattr(head, "weight", None)
    shape = getattr(weight, "shape", None)
    return int(shape[0]) if shape else getattr(model.config, "vocab_size", None)


# generate() keywords record() makes itself from the prompts (passed again: "got multiple values for keyword").
_MADE_BY_RECORD = ("input_ids", "attention_mask", "inputs", "inputs_embeds")


def check_tokenizer(tokenizer: Any) -> None:
    """The tokenizer argument: something that tokenizes and decodes (None failed with an AttributeError)."""
    needed = ("decode", "convert_ids_to_tokens")
    if tokenizer is None or isinstance(tokenizer, (str, bytes, int)) or not all(hasattr(tokenizer, n) for n in needed):
        raise ValueError(
            "record(): tokenizer must be a transformers tokenizer (the model's own: AutoTokenizer.from_pretrained"
            f"(...)), got {type(tokenizer).__name__} {short(tokenizer)}."
        )


def check_seeded(sampling: bool, seed: int | None, where: str = "record()") -> None:
    """Sampling needs a seed: unseeded, each run draws other tokens, and a trace that can never be reproduced
    would fail every later run as a regression at step 0."""
    if sampling and seed is None:
        raise ValueError(
            f"{where}: do_sample=True samples, but no seed= was given: each run would draw other tokens, so the "
            f"trace could never be checked. Pass seed=<an integer> ({where.removesuffix(')')}..., seed=0)), or "
            "do_sample=False."
        )


def check_generate_kwargs(kwargs: Mapping[str, Any]) -> None:
    """Keyword arguments record() hands to generate() whose wrong shape fails deep inside it (``object of type 'Ban'
    has no len()`` for a single processor, ``'dict' object has no attribute 'max_new_tokens'``)."""
    from transformers import GenerationConfig

    for name in _MADE_BY_RECORD:
        if name in kwargs:
            raise ValueError(
                f"record(): {name}= is made by record() from the prompts (it tokenizes and pads them itself); "
                "leave it out."
            )

    config = kwargs.get("generation_config")
    if config is not None and not isinstance(config, GenerationConfig):
        raise ValueError(
            f"record(): generation_config must be a transformers GenerationConfig, got {type(config).__name__} "
            f"{short(config)}; pass GenerationConfig(...), or the settings themselves as keyword arguments."
        )
    for name, kind in (("logits_processor", "LogitsProcessorList"), ("stopping_criteria", "StoppingCriteriaList")):
        value = kwargs.get(name)
        if value is None:
            continue
        if not isinstance(value, (list, tuple)):
            raise ValueError(
                f"record(): {name} must be a list ({kind}([...])), got {type(value).__name__} {short(value)}; "
                f"wrap it: {name}={kind}([...])."
            )
        for index, item in enumerate(value):
            if not callable(item):
                raise ValueError(
                    f"record(): {name}[{index}] is {type(item).__name__} {short(item)}, which cannot be called; "
                    f"pass {kind.removesuffix('List')} objects."
                )


def _number(config: GenerationConfig, name: str) -> float | None:
    value = getattr(config, name, None)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"record(): {name} must be a number, got {value!r}.")
    return float(value)


def check_generation_config(config: GenerationConfig) -> None:
    """Decoding settings that transformers accepts silently (``top_p=2``, ``min_new_tokens=-2``) or fails on with an
    internal error (``num_beams=0``). Sampling settings are checked only when sampling, beam settings only with beams:
    elsewhere they are inactive (``temperature=0`` with greedy decoding is common and harmless)."""
    beams = getattr(config, "num_beams", None)
    beams = integer(1 if beams is None else beams, "num_beams", minimum=1, where="record()")
    for name in ("min_new_tokens", "no_repeat_ngram_size"):
        value = getattr(config, name, None)
        if value is not None:
            integer(value, name, minimum=0, where="record()")
    penalty = _number(config, "repetition_penalty")
    if penalty is not None and not 0.0 < penalty < math.inf:
        raise ValueError(
            f"record(): repetition_penalty must be a finite number > 0, got {config.repetition_penalty!r}."
        )
    if beams > 1:
        length_penalty = _number(config, "length_penalty")
        if length_penalty is not None and not math.isfinite(length_penalty):
            raise ValueError(f"record(): length_penalty must be a finite number, got {config.length_penalty!r}.")
    if not getattr(config, "do_sample", False):
        return
    if getattr(config, "top_k", None) is not None:
        integer(config.top_k, "top_k (sampling, in the generation config)", minimum=0, where="record()")
    temperature = _number(config, "temperature")
    if temperature is not None and not 0.0 < temperature < math.inf:
        raise ValueError(
            f"record(): temperature must be a finite number > 0 when sampling, got {config.temperature!r}."
        )
    for name in ("top_p", "typical_p", "min_p"):
        number = _number(config, name)
        if number is None:
            continue
        low_ok = number >= 0.0 if name == "min_p" else number > 0.0
        if not (low_ok and number <= 1.0):
            interval = "in [0, 1]" if name == "min_p" else "in (0, 1]"
            raise ValueError(f"record(): {name} must be {interval}, got {getattr(config, name)!r}.")


def check_model(model: PreTrainedModel) -> None:
    """A model whose weights are on the meta device, and that accelerate's hooks do not hold either (offload), has no
    numbers to generate with; a model without torch parameters (optimum's ONNX Runtime / OpenVINO classes) is known by
    its files, so it needs a folder of them."""
    if not has_parameters(model):
        if weights_folder(model) is None:
            raise ValueError(
                f"record(): the model ({type(model).__name__}) has no parameters and no folder of weight files "
                "(model_save_dir, or config.name_or_path) to fingerprint it by; pass a loaded model, or load it "
                "from a folder (from_pretrained(folder))."
            )
        return
    tensor_parallel.check_heads(model, "record()")
    if not any(p.is_meta for p in model.parameters()):
        return
    # accelerate's offload keeps weights on the meta device too, with their data in its hooks (`hf.offload`): those
    # are weights; a meta weight no hook holds has no data anywhere.
    missing = offload.unheld(model, model.state_dict(keep_vars=True))
    if missing:
        raise ValueError(
            f"record(): the model ({type(model).__name__}) has weights on the meta device (shapes without data) "
            f"that no accelerate hook holds either: {len(missing)} weight(s) with no data anywhere "
            f"({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}); an offloaded model's meta weights are "
            "read from its offload folder, checkpoint or CPU state dict, these are not. Load real weights first "
            "(from_pretrained(...), with device_map=... and offload_folder=... to offload, or to_empty(device=...) "
            "and load_state_dict(...))."
        )


def context_length(model: PreTrainedModel) -> tuple[int, str] | None:
    """(positions the model can attend to, the config attribute that says so); None for relative positions (T5)."""
    config = model.config
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    for name in _CONTEXT_ATTRIBUTES:
        value = vars(text_config).get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value, name
    return None


def check_prompt_tokens(
    model: PreTrainedModel,
    prompts: Sequence[str],
    token_ids: Sequence[Sequence[int]],
    max_new_tokens: int,
) -> None:
    """Every prompt has tokens, only ids the model's embeddings hold, and fits the context with the new tokens."""
    arch = getattr(model.config, "model_type", None) or type(model).__name__
    for index, (prompt, ids) in enumerate(zip(prompts, token_ids, strict=True)):
        if not ids:
            raise ValueError(
                f"record(): prompt {index} ({quote(prompt, 30)}) has no tokens; generation needs at least one prompt "
                "token: give it some text (or start it with the tokenizer's BOS token)."
            )
    try:
        embeddings = model.get_input_embeddings()
    except (AttributeError, NotImplementedError):  # a model that does not say: nothing to check against
        embeddings = None
    rows = getattr(embeddings, "num_embeddings", None)
    if isinstance(rows, int):
        for index, ids in enumerate(token_ids):
            beyond = [i for i in ids if not 0 <= i < rows]
            if beyond:
                raise ValueError(
                    f"record(): prompt {index} has token id {beyond[0]}, but {arch}'s input embeddings hold ids 0 to "
                    f"{rows - 1}; the tokenizer does not belong to this model: pass the model's own tokenizer."
                )
    limit = context_length(model)
    if limit is None:
        return
    context, attribute = limit
    encoder_decoder = bool(getattr(model.config, "is_encoder_decoder", False))
    longest = max(range(len(token_ids)), key=lambda i: len(token_ids[i]))
    n = len(token_ids[longest])
    where = f"{arch}'s context is {context} positions (config.{attribute})"
    if n > context:
        raise ValueError(f"record(): prompt {longest} has {n} tokens; {where}: shorten the prompt.")
    # Decoder-only: every row of the left-padded batch is as long as the longest prompt, and grows by one per step.
    # Encoder-decoder: the decoder starts from one start token.
    used = (1 if encoder_decoder else n) + max_new_tokens
    if used > context:
        room = context - (1 if encoder_decoder else n)
        whose = "the decoder's start token" if encoder_decoder else f"prompt {longest}'s {n} tokens"
        raise ValueError(
            f"record(): max_new_tokens={max_new_tokens} after {whose} needs {used} positions; {where}: "
            f"lower max_new_tokens to {room} or less{'' if encoder_decoder else ', or shorten the prompt'}."
        )


def torch_device(device: Any, where: str, torch_mod: Any = None) -> torch.device:
    """`device` as a `torch.device` that can hold a model here; None means the CPU. `torch_mod` answers the
    availability questions (tests pass a fake CUDA torch)."""
    import torch

    backends = torch if torch_mod is None else torch_mod
    if device is None:
        return torch.device("cpu")
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError, ValueError) as exc:
        raise ValueError(
            f"{where}: device={device!r} is not a torch device ({str(exc).splitlines()[0]}); use 'cpu', 'cuda' or "
            "'cuda:N'."
        ) from None
    if parsed.type == "meta":
        raise ValueError(
            f"{where}: device={device!r} holds shapes without data; a fine-tuned model needs real weights: use 'cpu' "
            "or a 'cuda' device."
        )
    if parsed.type == "cpu":
        return parsed
    backend = getattr(backends, parsed.type, None)
    available = getattr(backend, "is_available", None)
    if not callable(available) or not available():
        reason = cuda_unavailable_reason(backends) if parsed.type == "cuda" else f"torch.{parsed.type} is not available"
        raise ValueError(
            f"{where}: device={device!r}: {parsed.type.upper()} is not available here ({reason}); use 'cpu' or None."
        )
    count = getattr(backend, "device_count", None)
    if parsed.index is not None and callable(count) and parsed.index >= int(count()):
        raise ValueError(
            f"{where}: device={device!r}: device index {parsed.index} is out of range; this machine has "
            f"{int(count())} {parsed.type} device(s) (0 to {int(count()) - 1})."
        )
    return parsed
