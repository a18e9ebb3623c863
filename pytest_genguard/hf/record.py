"""`record()`: one batched `generate()` call, captured as a `GenerationTrace`; `generate_from_ids`: the same from
token ids (no re-tokenization), also returning `generate()`'s output (the invariants and the recorder use it).

Both run one private pipeline, `_generate` (argument checks, padding, the call, the steps, beam path lengths,
stop-string padding, the texts of alternatives); they differ only in how the batch is made (pytest-regressions'
`perform_regression_check` is the model: the fixtures differ only in their callbacks).

Raw logits (`output_logits=True`) give each step's top-k of log-softmax; processed scores (`output_scores=True`) give
the score decoding actually used for the chosen token. Both need `return_dict_in_generate=True`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_genguard.core import validation
from pytest_genguard.core.events import FragileStep, RecordEvent, emit
from pytest_genguard.core.tolerances import tolerances_in_force
from pytest_genguard.core.trace import GenerationTrace
from pytest_genguard.hf import inputs as checks, offload, prompt_forms
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
from pytest_genguard.hf.fingerprint import model_fingerprint
from pytest_genguard.hf.sampled_support import sampled_supports
from pytest_genguard.hf.tokenizer_hash import tokenizer_fingerprint

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["SETTING_KEYS", "generate_from_ids", "record"]


def record(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Any,
    /,
    *,
    max_new_tokens: int,
    top_k: int = 5,
    seed: int | None = None,
    chat_template_kwargs: Mapping[str, Any] | None = None,
    **generate_kwargs: Any,
) -> GenerationTrace:
    """Generate for `prompts` in one batched call and capture token paths with per-step top-k logprobs.

    A prompt is a string, a list of token ids, or a conversation (a list of ``{"role", "content"}`` messages,
    encoded with the tokenizer's chat template as ``apply_chat_template(tokenize=True)`` encodes it, with
    ``add_generation_prompt=True`` and `chat_template_kwargs`; see `pytest_genguard.hf.prompt_forms`).
    `top_k` is how many alternatives are recorded per step; a sampling top-k goes in a `generation_config`.
    `seed` seeds sampling without touching the caller's RNG. Other keyword arguments go to `generate()` (``tokenizer=``
    too, as transformers documents it for ``stop_strings``).
    """
    checks.check_tokenizer(tokenizer)
    call = _Call.checked("record()", model, prompts, max_new_tokens, top_k, seed, generate_kwargs, forms=True)
    kwargs = prompt_forms.chat_kwargs(chat_template_kwargs, call.forms, where="record()")
    if call.forms is not None:
        encoded = prompt_forms.encode(tokenizer, call.forms, kwargs, where="record()")
        call = dataclasses.replace(call, prompts=encoded.texts)

        def from_forms(pad_id: Any, left: bool) -> _Batch:
            pad = int(pad_id if isinstance(pad_id, int) else pad_id[0])
            return _Batch(_padded(encoded.ids, pad, left=left), list(encoded.ids), encoded=encoded)

        trace, _, _ = _generate(model, tokenizer, call, from_forms)
        _report_fragile_steps(trace)
        return trace

    def tokenize(pad_id: Any, left: bool) -> _Batch:
        batch = _encode(tokenizer, call.prompts, pad_id, left=left)
        mask = batch["attention_mask"].tolist()
        prompt_ids = [
            tuple(int(i) for i, m in zip(row, mask[b], strict=False) if m)
            for b, row in enumerate(batch["input_ids"].tolist())
        ]
        return _Batch(batch, prompt_ids)

    trace, _, _ = _generate(model, tokenizer, call, tokenize)
    _report_fragile_steps(trace)
    return trace


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
    encoded: prompt_forms.Encoded | None = None,
    **generate_kwargs: Any,
) -> tuple[GenerationTrace, Any, int]:
    """`record()` from token ids instead of text (no re-tokenization), also returning generate()'s output.

    `rows` are the (encoder) input ids per prompt, padded here on the tokenizer's side for the model type;
    `decoder_rows` are decoder prefixes for encoder-decoder models (all of one length). `encoded`: the rows came
    from prompts given as token ids or conversations (`prompt_forms.encode`), which the trace keeps as record()'s
    does. Returns the trace (its prompt_ids are `rows`), the `generate()` output (raw `logits`, processed `scores`,
    `sequences`) and the column of `sequences` where generated tokens start. The arguments are checked as
    record()'s are.
    """
    checks.check_tokenizer(tokenizer)
    call = _Call.checked("generate_from_ids()", model, prompts, max_new_tokens, top_k, seed, generate_kwargs)
    if len(rows) != len(call.prompts):
        raise ValueError(f"generate_from_ids(): {len(call.prompts)} prompts but {len(rows)} rows of token ids.")

    def tokenize(pad_id: Any, left: bool) -> _Batch:
        pad = int(pad_id if isinstance(pad_id, int) else pad_id[0])
        return _Batch(_padded(rows, pad, left=left), [tuple(int(i) for i in r) for r in rows], decoder_rows, encoded)

    return _generate(model, tokenizer, call, tokenize)


@dataclass(frozen=True)
class _Call:
    """One recording's checked arguments (the same checks for record() and generate_from_ids())."""

    prompts: list[str]
    max_new_tokens: int
    top_k: int
    seed: int | None
    generate_kwargs: dict[str, Any]
    forms: list[prompt_forms.Form] | None = None  # None: every prompt is text

    @classmethod
    def checked(
        cls,
        where: str,
        model: PreTrainedModel,
        prompts: Any,
        max_new_tokens: Any,
        top_k: Any,
        seed: Any,
        generate_kwargs: dict[str, Any],
        *,
        forms: bool = False,
    ) -> _Call:
        """The arguments checked before anything reaches transformers (see `pytest_genguard.hf.inputs`). `forms`:
        prompts may be token ids and conversations too (record(); generate_from_ids()'s are the texts of its rows)."""
        if forms:
            prompt_list, given = prompt_forms.checked(prompts, where=where)
        else:
            prompt_list, given = validation.prompt_list(prompts, where=where), None
        max_new = validation.integer(max_new_tokens, "max_new_tokens", minimum=1, where=where)
        k = validation.integer(top_k, "top_k", minimum=1, where=where)
        checked_seed = validation.seed(seed, where=where)
        checks.check_model(model)
        checks.check_top_k(k, model)
        checks.check_generate_kwargs(generate_kwargs)
        return cls(prompt_list, max_new, k, checked_seed, dict(generate_kwargs), given)


@dataclass(frozen=True)
class _Batch:
    """What tokenizing gave: the padded batch (CPU tensors), each prompt's own ids, decoder prefixes if any."""

    tensors: dict[str, torch.Tensor]
    prompt_ids: list[tuple[int, ...]]
    decoder_rows: Sequence[Sequence[int]] | None = None
    encoded: prompt_forms.Encoded | None = None  # prompts given as token ids or conversations


def _generate(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, call: _Call, tokenize: Callable[[Any, bool], _Batch]
) -> tuple[GenerationTrace, Any, int]:
    """The one recording pipeline: prepare, tokenize (the only step the callers differ in), generate, collect the
    steps, slice the paths (beam hypotheses to their own lengths), token texts, the prompt traces, the trace."""
    import torch

    encoder_decoder = bool(getattr(model.config, "is_encoder_decoder", False))
    prepared = prepare(model, tokenizer, call.max_new_tokens, dict(call.generate_kwargs))
    assistant = prepared.model_kwargs.get("assistant_model")
    if assistant is not None and len(call.prompts) > 1:
        raise ValueError(
            f"record(): assisted decoding (assistant_model=) generates for one prompt at a time (transformers' batch "
            f"limit), but {len(call.prompts)} prompts were given; record each prompt on its own, or drop "
            "assistant_model."
        )
    checks.check_seeded(bool(prepared.config.do_sample), call.seed)
    device = model_device(model)
    if "stop_strings" in call.generate_kwargs or getattr(prepared.config, "stop_strings", None):
        prepared.model_kwargs.setdefault("tokenizer", tokenizer)  # generate() needs it to match stop strings
    with inference(model, tokenizer, "right" if encoder_decoder else "left"):
        batch = tokenize(prepared.config.pad_token_id, not encoder_decoder)
        checks.check_prompt_tokens(model, call.prompts, batch.prompt_ids, call.max_new_tokens)
        inputs = {name: tensor.to(device) for name, tensor in batch.tensors.items()}
        start = 1 if encoder_decoder else inputs["input_ids"].shape[1]
        if batch.decoder_rows is not None:
            inputs["decoder_input_ids"] = torch.tensor([list(r) for r in batch.decoder_rows], device=device)
            start = inputs["decoder_input_ids"].shape[1]
        with seeded(call.seed, [device, *offload.cuda_devices(model)]), length_clash_muted():
            out = model.generate(**inputs, generation_config=prepared.config, **prepared.model_kwargs)
        steps = collect_steps(out, len(call.prompts), call.top_k)
        fingerprint = model_fingerprint(model)
        supports = sampled_supports(
            model,
            tokenizer,
            prepared.settings,
            out,
            len(call.prompts),
            start,
            None if encoder_decoder else inputs.get("attention_mask"),
            [s["top_ids"] for s in steps],
            [s["lse"] for s in steps],
            fingerprint.dtype,
        )
    generated = out.sequences[:, start:].tolist()
    lengths = path_lengths(out)
    if lengths is not None:  # beam search: a hypothesis that ended early is followed by padding
        generated = [row[:n] for row, n in zip(generated, lengths, strict=True)]
    texts = token_texts(
        tokenizer, [i for row in generated for i in row] + [i for s in steps for i in s["top_ids_flat"]]
    )
    eos = eos_ids(prepared.config)
    # Only a stopping criterion ends one sequence of the batch early (its tail is then padding); without one, a pad id
    # in the output was generated (an untrained model may well emit it).
    can_stop_early = bool(
        getattr(prepared.config, "stop_strings", None) or prepared.model_kwargs.get("stopping_criteria")
    )
    pad_id = prepared.config.pad_token_id if can_stop_early and isinstance(prepared.config.pad_token_id, int) else None
    prompt_traces = [
        prompt_trace(
            p, batch.prompt_ids[b], generated[b], steps, b, texts, eos, call.max_new_tokens, tokenizer, pad_id, supports
        )
        for b, p in enumerate(call.prompts)
    ]
    chat_settings: dict[str, Any] = {}
    if batch.encoded is not None:  # the conversations and ids as given, for failures and reports
        encoded = batch.encoded
        prompt_traces = [
            dataclasses.replace(p, messages=encoded.messages[b], from_ids=encoded.from_ids[b])
            for b, p in enumerate(prompt_traces)
        ]
        chat_settings = encoded.settings
    trace = GenerationTrace(
        prompts=tuple(prompt_traces),
        settings={
            **prepared.settings,
            **chat_settings,
            **({} if assistant is None else {"assistant_model": model_fingerprint(assistant).short()}),
            "record_top_k": call.top_k,
            "seed": call.seed,
        },
        model=fingerprint,
        tokenizer=tokenizer_fingerprint(tokenizer),
        environment=environment(model, device),
        token_texts=alternative_texts(prompt_traces, texts),
    )
    return trace, out, start


def _encode(
    tokenizer: PreTrainedTokenizerBase, prompts: list[str], pad_id: Any, *, left: bool
) -> dict[str, torch.Tensor]:
    """The padded batch. A tokenizer without a pad token (GPT-2's own) cannot pad, so the batch is padded here with
    the id `generate()` pads with: padding is masked, so which id fills it does not change what is generated."""
    if tokenizer.pad_token_id is not None or len(prompts) == 1:
        batch = tokenizer(prompts, return_tensors="pt", padding=len(prompts) > 1)  # one prompt needs no padding
        return {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    if not isinstance(pad_id, int):
        raise ValueError(
            "record(): the tokenizer has neither a pad token nor an EOS token, so a batch of prompts cannot be padded; "
            "set one (tokenizer.pad_token = ...) or record the prompts one at a time."
        )
    return _padded(tokenizer(prompts)["input_ids"], pad_id, left=left)


def _padded(rows: Sequence[Sequence[int]], pad_id: int, *, left: bool) -> dict[str, torch.Tensor]:
    """Rows of token ids padded with `pad_id` to one width, on the left (decoder-only) or the right, and their mask."""
    import torch

    width = max(len(r) for r in rows)
    ids = [[pad_id] * (width - len(r)) + list(r) if left else list(r) + [pad_id] * (width - len(r)) for r in rows]
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
