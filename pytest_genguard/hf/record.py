"""`record()`: one batched `generate()` call, captured as a `GenerationTrace`; `generate_from_ids`: the same from
token ids (no re-tokenization), also returning `generate()`'s output (the invariants and the recorder use it).

Raw logits (`output_logits=True`) give each step's top-k of log-softmax; processed scores (`output_scores=True`) give
the score decoding actually used for the chosen token. Both need `return_dict_in_generate=True`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pytest_genguard.core import validation
from pytest_genguard.core.events import FragileStep, RecordEvent, emit
from pytest_genguard.core.tolerances import tolerances_in_force
from pytest_genguard.core.trace import GenerationTrace
from pytest_genguard.hf import inputs as checks
from pytest_genguard.hf._generation import (
    SETTING_KEYS,
    alternative_texts,
    collect_steps,
    eos_ids,
    inference,
    length_clash_muted,
    path_lengths,
    prepare,
    prompt_trace,
    seeded,
    token_texts,
)
from pytest_genguard.hf.environment import environment, model_device
from pytest_genguard.hf.fingerprint import model_fingerprint, tokenizer_fingerprint

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["SETTING_KEYS", "generate_from_ids", "record"]


def record(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: str | Sequence[str],
    *,
    max_new_tokens: int,
    top_k: int = 5,
    seed: int | None = None,
    **generate_kwargs: Any,
) -> GenerationTrace:
    """Generate for `prompts` in one batched call and capture token paths with per-step top-k logprobs.

    `top_k` is how many alternatives are recorded per step; a sampling top-k goes in a `generation_config`.
    `seed` seeds sampling without touching the caller's RNG. Other keyword arguments go to `generate()`.
    """
    prompt_list, max_new_tokens, top_k, seed = _checked_arguments(model, prompts, max_new_tokens, top_k, seed)
    checks.check_generate_kwargs(generate_kwargs)
    encoder_decoder = bool(getattr(model.config, "is_encoder_decoder", False))
    prepared = prepare(model, tokenizer, max_new_tokens, dict(generate_kwargs))
    device = model_device(model)
    if "stop_strings" in generate_kwargs or getattr(prepared.config, "stop_strings", None):
        prepared.model_kwargs.setdefault("tokenizer", tokenizer)
    with inference(model, tokenizer, "right" if encoder_decoder else "left"):
        batch = _encode(tokenizer, prompt_list, prepared.config.pad_token_id, left=not encoder_decoder)
        mask = batch["attention_mask"].tolist()
        all_prompt_ids = [
            tuple(int(i) for i, m in zip(row, mask[b], strict=False) if m)
            for b, row in enumerate(batch["input_ids"].tolist())
        ]
        checks.check_prompt_tokens(model, prompt_list, all_prompt_ids, max_new_tokens)
        inputs = {"input_ids": batch["input_ids"].to(device), "attention_mask": batch["attention_mask"].to(device)}
        with seeded(seed, device), length_clash_muted():
            out = model.generate(
                **inputs,
                generation_config=prepared.config,
                **prepared.model_kwargs,
            )
        steps = collect_steps(out, len(prompt_list), top_k)
    start = 1 if encoder_decoder else inputs["input_ids"].shape[1]
    generated = out.sequences[:, start:].tolist()
    lengths = path_lengths(out)
    if lengths is not None:  # beam search: a hypothesis that ended early is followed by padding
        generated = [row[:n] for row, n in zip(generated, lengths, strict=True)]
    ids_in_trace = [i for row in generated for i in row] + [i for s in steps for i in s["top_ids_flat"]]
    texts = token_texts(tokenizer, ids_in_trace)
    eos = eos_ids(prepared.config)
    # Only a stopping criterion ends one sequence of the batch early (its tail is then padding); without one, a pad id
    # in the output was generated (an untrained model may well emit it).
    can_stop_early = bool(
        getattr(prepared.config, "stop_strings", None) or prepared.model_kwargs.get("stopping_criteria")
    )
    pad_id = prepared.config.pad_token_id if can_stop_early and isinstance(prepared.config.pad_token_id, int) else None
    prompt_traces = [
        prompt_trace(prompt, all_prompt_ids[b], generated[b], steps, b, texts, eos, max_new_tokens, tokenizer, pad_id)
        for b, prompt in enumerate(prompt_list)
    ]
    settings = dict(prepared.settings)
    settings["record_top_k"] = top_k
    settings["seed"] = seed
    trace = GenerationTrace(
        prompts=tuple(prompt_traces),
        settings=settings,
        model=model_fingerprint(model),
        tokenizer=tokenizer_fingerprint(tokenizer),
        environment=environment(model, device),
        token_texts=alternative_texts(prompt_traces, texts),
    )
    _report_fragile_steps(trace)
    return trace


def _checked_arguments(
    model: PreTrainedModel, prompts: Any, max_new_tokens: Any, top_k: Any, seed: Any
) -> tuple[list[str], int, int, int | None]:
    """record()'s own arguments, checked before anything reaches transformers (see `pytest_genguard.hf.inputs`)."""
    prompt_list = validation.prompt_list(prompts, where="record()")
    max_new = validation.integer(max_new_tokens, "max_new_tokens", minimum=1, where="record()")
    k = validation.integer(top_k, "top_k", minimum=1, where="record()")
    checked_seed = validation.optional_integer(seed, "seed", where="record()")
    checks.check_model(model)
    checks.check_top_k(k, model)
    return prompt_list, max_new, k, checked_seed


def _encode(
    tokenizer: PreTrainedTokenizerBase, prompts: list[str], pad_id: Any, *, left: bool
) -> dict[str, torch.Tensor]:
    """The padded batch. A tokenizer without a pad token (GPT-2's own) cannot pad, so the batch is padded here with
    the id `generate()` pads with: padding is masked, so which id fills it does not change what is generated."""
    import torch

    if tokenizer.pad_token_id is not None or len(prompts) == 1:
        batch = tokenizer(prompts, return_tensors="pt", padding=True)
        return {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    if not isinstance(pad_id, int):
        raise ValueError(
            "record(): the tokenizer has neither a pad token nor an EOS token, so a batch of prompts cannot be padded; "
            "set one (tokenizer.pad_token = ...) or record the prompts one at a time."
        )
    rows = [list(ids) for ids in tokenizer(prompts)["input_ids"]]
    width = max(len(r) for r in rows)
    ids = [[pad_id] * (width - len(r)) + r if left else r + [pad_id] * (width - len(r)) for r in rows]
    mask = [[0] * (width - len(r)) + [1] * len(r) if left else [1] * len(r) + [0] * (width - len(r)) for r in rows]
    return {"input_ids": torch.tensor(ids, dtype=torch.long), "attention_mask": torch.tensor(mask, dtype=torch.long)}


def _report_fragile_steps(trace: GenerationTrace) -> None:
    """Tell the running test how many steps sit on a near tie: a snapshot of such a step is fragile."""
    tolerances = tolerances_in_force(trace.dtype)
    steps = [s for p in trace for s in p.steps]
    fragile = [
        FragileStep(i, p.prompt, n, s.margin)
        for i, p in enumerate(trace)
        for n, s in enumerate(p.steps)
        if tolerances.near_tie(s.margin)
    ]
    # The first 50 are named in the summary (-v); the count is exact.
    emit(RecordEvent(len(fragile), tuple(fragile[:50]), len(trace), len(steps)))


def generate_from_ids(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    rows: Sequence[Sequence[int]],
    *,
    decoder_rows: Sequence[Sequence[int]] | None = None,
    max_new_tokens: int,
    top_k: int = 5,
    seed: int | None = None,
    **generate_kwargs: Any,
) -> tuple[GenerationTrace, Any, int]:
    """`record()` from token ids instead of text (no re-tokenization), also returning generate()'s output.

    `rows` are the (encoder) input ids per prompt, padded here on the tokenizer's side for the model type;
    `decoder_rows` are decoder prefixes for encoder-decoder models (all of one length). Returns the trace (its
    prompt_ids are `rows`), the `generate()` output (raw `logits`, processed `scores`, `sequences`) and the column
    of `sequences` where generated tokens start.
    """
    import torch

    encoder_decoder = bool(getattr(model.config, "is_encoder_decoder", False))
    prepared = prepare(model, tokenizer, max_new_tokens, dict(generate_kwargs))
    pad = prepared.config.pad_token_id
    pad_id = int(pad if isinstance(pad, int) else pad[0])
    device = model_device(model)
    width = max(len(r) for r in rows)
    ids, mask = [], []
    for r in rows:
        fill = width - len(r)
        left = not encoder_decoder  # decoder-only models continue from the right end: pad on the left
        ids.append([pad_id] * fill + list(r) if left else list(r) + [pad_id] * fill)
        mask.append([0] * fill + [1] * len(r) if left else [1] * len(r) + [0] * fill)
    inputs: dict[str, Any] = {
        "input_ids": torch.tensor(ids, device=device),
        "attention_mask": torch.tensor(mask, device=device),
    }
    if decoder_rows is not None:
        inputs["decoder_input_ids"] = torch.tensor([list(r) for r in decoder_rows], device=device)
    with inference(model), seeded(seed, device), length_clash_muted():
        out = model.generate(**inputs, generation_config=prepared.config, **prepared.model_kwargs)
    steps = collect_steps(out, len(rows), top_k)
    start = out.sequences.shape[1] - len(steps)
    generated = out.sequences[:, start:].tolist()
    texts = token_texts(
        tokenizer, [i for row in generated for i in row] + [i for s in steps for i in s["top_ids_flat"]]
    )
    eos = eos_ids(prepared.config)
    traces = [
        prompt_trace(p, tuple(int(i) for i in r), generated[b], steps, b, texts, eos, max_new_tokens, tokenizer)
        for b, (p, r) in enumerate(zip(prompts, rows, strict=True))
    ]
    settings = {**prepared.settings, "record_top_k": top_k, "seed": seed}
    trace = GenerationTrace(
        prompts=tuple(traces),
        settings=settings,
        model=model_fingerprint(model),
        tokenizer=tokenizer_fingerprint(tokenizer),
        environment=environment(model, device),
    )
    return trace, out, start
