"""Teacher forcing: what a model gives along a recorded path, from one forward pass per batch.

For decoder-only models the batch is prompt + recorded path, left padded, with the attention mask and position ids
`generate()` used; for encoder-decoder models the encoder runs once and ``decoder_input_ids`` = start token + path.
The logits processors the recording used are rebuilt from `trace.settings` with transformers' public classes
(`pytest_genguard.hf.rebuilt_processors`) and re-applied to those logits, all steps at once
(`pytest_genguard.hf.forced_processors`; no further forward passes). See
`pytest_genguard.hf.verify` for how the result is judged.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from pytest_genguard.core.text import number, quote
from pytest_genguard.core.trace import GenerationTrace, PromptTrace, Step
from pytest_genguard.hf import prompt_forms
from pytest_genguard.hf._generation import (
    Float64LogSoftmax,
    alternative_texts,
    inference,
    int_setting,
    token_texts,
)
from pytest_genguard.hf.environment import environment, model_device
from pytest_genguard.hf.fingerprint import model_fingerprint
from pytest_genguard.hf.forced_processors import apply_along_path
from pytest_genguard.hf.rebuilt_processors import build_processors, model_eos_ids
from pytest_genguard.hf.tokenizer_hash import tokenizer_fingerprint

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = [
    "EngineLogits",
    "Preference",
    "forced_logits",
    "per_call_quantization",
    "teacher_force",
    "teacher_force_with_preferences",
]

EngineLogits = Callable[[GenerationTrace, int], "torch.Tensor"]
"""Another engine's forward pass (`pytest_genguard.engines`): the raw float32 logits ``[prompts, steps, vocab]``
that predict each recorded step of the trace, in place of the model's own forward pass."""


@dataclasses.dataclass(frozen=True)
class Preference:
    """A step of a greedy trace where the teacher-forced model now prefers another token than the recorded one."""

    prompt_index: int
    step: int
    recorded_id: int
    recorded_token: str
    recorded_logprob: float  # as stored in the trace
    recorded_logprob_now: float  # the recorded token's logprob under the model now
    preferred_id: int
    preferred_token: str
    preferred_logprob: float  # the now-preferred token's logprob under the model now

    def __str__(self) -> str:
        return (
            f"prompt {self.prompt_index} step {self.step}: the model now prefers {quote(self.preferred_token, 20)} "
            f"(id {self.preferred_id}, logprob {number(self.preferred_logprob)}) to the recorded "
            f"{quote(self.recorded_token, 20)} (id {self.recorded_id}, logprob {number(self.recorded_logprob_now)} "
            f"now, {number(self.recorded_logprob)} recorded)"
        )


def _pad_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> tuple[int, int]:
    """(the tokenizer's prompt padding id, the id generate() writes after a sequence finished)."""
    eos = model_eos_ids(model, tokenizer)
    fallback = eos[0] if eos else 0
    prompt_pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else fallback
    gen_pad = model.generation_config.pad_token_id
    if not isinstance(gen_pad, int):
        gen_pad = prompt_pad
    return int(prompt_pad), int(gen_pad)


@dataclasses.dataclass
class _Batch:
    """Teacher-forcing inputs: `sequences[:, :start + t]` is what the processors saw at step t."""

    logits: torch.Tensor  # [B, T, V] raw logits for steps 0..T-1, float32
    sequences: torch.Tensor  # [B, start + T] prompt (decoder-only) or start token (encoder-decoder) + paths
    start: int
    prompt_mask: torch.Tensor | None


def _forward(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    trace: GenerationTrace,
    steps: int,
    engine: EngineLogits | None = None,
) -> _Batch:
    """One forward pass over prompt + recorded path for the whole batch (through `engine` when one is given)."""
    import torch

    device = model_device(model)
    prompt_pad, gen_pad = _pad_ids(model, tokenizer)
    batch = len(trace.prompts)
    paths = torch.full((batch, steps), gen_pad, dtype=torch.long)
    for b, p in enumerate(trace.prompts):
        if p.steps:
            paths[b, : len(p.steps)] = torch.tensor([s.token_id for s in p.steps], dtype=torch.long)
    longest = max(len(p.prompt_ids) for p in trace.prompts)
    ids = torch.full((batch, longest), prompt_pad, dtype=torch.long)
    mask = torch.zeros((batch, longest), dtype=torch.long)
    encoder_decoder = bool(getattr(model.config, "is_encoder_decoder", False))
    for b, p in enumerate(trace.prompts):
        n = len(p.prompt_ids)
        if n == 0:
            continue
        span = slice(0, n) if encoder_decoder else slice(longest - n, longest)  # record() pads right / left
        ids[b, span] = torch.tensor(p.prompt_ids, dtype=torch.long)
        mask[b, span] = 1
    if encoder_decoder:
        if engine is not None:
            raise ValueError("teacher forcing through another engine supports decoder-only models only")
        start_id = model.generation_config.decoder_start_token_id
        if start_id is None:
            start_id = getattr(model.config, "decoder_start_token_id", None)
        start = torch.full((batch, 1), int(start_id if start_id is not None else prompt_pad), dtype=torch.long)
        sequences = torch.cat([start, paths], dim=1)
        out = model(
            input_ids=ids.to(device),
            attention_mask=mask.to(device),
            decoder_input_ids=sequences[:, :steps].to(device),
            use_cache=False,
        )
        return _Batch(out.logits.float(), sequences, 1, None)
    sequences = torch.cat([ids, paths], dim=1)
    if engine is not None:
        return _Batch(engine(trace, steps).float(), sequences, longest, mask)
    full_mask = torch.cat([mask, torch.ones((batch, steps), dtype=torch.long)], dim=1)
    positions = full_mask.cumsum(-1) - 1
    positions.masked_fill_(full_mask == 0, 1)  # as generate() does for left padding
    kwargs: dict[str, Any] = {}
    if _takes_logits_to_keep(model.forward):
        kwargs["logits_to_keep"] = steps + 1  # only the positions that predict a step (and the last token)
    out = model(
        input_ids=sequences[:, : longest + steps].to(device),
        attention_mask=full_mask.to(device),
        position_ids=positions.to(device),
        use_cache=False,
        **kwargs,
    )
    logits = out.logits[:, -(steps + 1) : -1] if "logits_to_keep" in kwargs else out.logits[:, longest - 1 : -1]
    return _Batch(logits.float(), sequences, longest, mask)


def _takes_logits_to_keep(forward: Any) -> bool:
    """Whether the model's forward() takes `logits_to_keep` (memoized per forward function: `inspect.signature`
    costs more than the rest of a tiny model's verify())."""
    function = getattr(forward, "__func__", None)
    if function is None:
        return "logits_to_keep" in inspect.signature(forward).parameters
    return _function_takes_logits_to_keep(function)


@functools.lru_cache(maxsize=64)
def _function_takes_logits_to_keep(function: Any) -> bool:
    return "logits_to_keep" in inspect.signature(function).parameters


# torch's dynamically quantized modules (`torch.ao.quantization.quantize_dynamic`): Linear, LSTM, GRU, ...
_DYNAMIC_QUANTIZED = "torch.ao.nn.quantized.dynamic."


def per_call_quantization(model: Any) -> str | None:
    """Why teacher forcing cannot give the values `generate()` gave on `model` (None when it can): torch's dynamically
    quantized modules quantize their input with a range measured over each call's whole input, so one pass over a
    whole path and one token a step round the activations differently (measured on the tiny llama: logprobs
    differ by 3e-3 to 7e-3, past the float32 tolerance)."""
    modules = getattr(model, "modules", None)
    if not callable(modules):
        return None
    found = next((m for m in modules() if type(m).__module__.startswith(_DYNAMIC_QUANTIZED)), None)
    if found is None:
        return None
    return (
        f"the model has dynamically quantized modules ({type(found).__module__}.{type(found).__name__}, "
        "torch.ao.quantization.quantize_dynamic), which quantize activations with a range over each call's input: "
        "a teacher-forced pass cannot give what generate() gave step by step"
    )


def forced_logits(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, trace: GenerationTrace) -> torch.Tensor:
    """The raw logits ``[prompts, steps, vocab]`` (float32) that predict each recorded step of `trace`, from one
    forward pass over prompt + recorded path for the whole batch; steps past a prompt's own end are padding."""
    if not trace.prompts or not any(p.steps for p in trace.prompts):
        raise ValueError("the reference trace has no generated steps; record one with record(..., max_new_tokens=N)")
    with inference(model):
        return _forward(model, tokenizer, trace, max(len(p.steps) for p in trace.prompts)).logits


def teacher_force(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    trace: GenerationTrace,
    *,
    logits_processor: Sequence[Any] = (),
) -> GenerationTrace:
    """The trace `model` gives when forced along `trace`'s recorded paths (see the module docstring); the user's own
    `logits_processor` list is re-applied with the recorded settings' processors."""
    return teacher_force_with_preferences(model, tokenizer, trace, logits_processor=logits_processor)[0]


def teacher_force_with_preferences(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    trace: GenerationTrace,
    *,
    logits_processor: Sequence[Any] = (),
    engine: EngineLogits | None = None,
) -> tuple[GenerationTrace, tuple[Preference, ...]]:
    """`teacher_force`, plus the steps where a greedy path would now take another token (one per prompt at most).
    `engine` replaces the model's forward pass (the model still gives the generation config and fingerprint)."""

    if not trace.prompts:
        raise ValueError("verify(): the trace has no prompts; nothing to verify.")
    steps = max(len(p.steps) for p in trace.prompts)
    if steps == 0:
        raise ValueError("verify(): the trace has no generated steps; nothing to verify.")
    top_k = int_setting(trace.settings.get("record_top_k"), max(len(s.top_ids) for p in trace.prompts for s in p.steps))
    greedy = trace.settings.get("mode", "greedy") == "greedy"
    with inference(model):
        batch = _forward(model, tokenizer, trace, steps, engine)
        processors = build_processors(
            model,
            tokenizer,
            trace.settings,
            prompt_length=batch.start,
            prompt_mask=batch.prompt_mask,
            custom=list(logits_processor),
        )
        logits = batch.logits
        sequences = batch.sequences.to(logits.device)
        processed = apply_along_path(processors, logits, sequences, batch.start) if len(processors) else logits
        raw = Float64LogSoftmax.of(logits, top_k)
        top_vals, top_ids = raw.top()
        argmax = processed.argmax(dim=-1, keepdim=True)  # as generate() picks a greedy token
        chosen = sequences[:, batch.start :].unsqueeze(-1)
        # One device->host transfer per field; the values are float32, as traces store them.
        values = {
            "logprob": raw.at(chosen).cpu().tolist(),
            "score": processed.gather(-1, chosen).squeeze(-1).cpu().tolist(),
            "best": processed.gather(-1, argmax).squeeze(-1).cpu().tolist(),
            "argmax": argmax.squeeze(-1).cpu().tolist(),
            "argmax_logprob": raw.at(argmax).cpu().tolist(),
            "lse": raw.lse.float().cpu().tolist(),
            "top_vals": top_vals.cpu().tolist(),
            "top_ids": top_ids.cpu().tolist(),
        }
    prompt_ids = prompt_forms.ids_again(tokenizer, trace)
    preferred = {
        values["argmax"][b][t]
        for b, p in enumerate(trace.prompts)
        for t, s in enumerate(p.steps)
        if values["argmax"][b][t] != s.token_id
    }
    # Texts of the preferred tokens (greedy) and of every top-k id (the trace's token_texts), each id decoded once.
    top = {i for b, p in enumerate(trace.prompts) for t in range(len(p.steps)) for i in values["top_ids"][b][t]}
    texts = token_texts(tokenizer, sorted(top | (preferred if greedy else set())))
    prompts = []
    preferences = []
    for b, p in enumerate(trace.prompts):
        forced, preference = _forced_prompt(p, tuple(int(i) for i in prompt_ids[b]), b, values, texts, greedy)
        prompts.append(forced)
        if preference is not None:
            preferences.append(preference)
    device = model_device(model)
    actual = GenerationTrace(
        prompts=tuple(prompts),
        settings=dict(trace.settings),
        model=model_fingerprint(model),
        tokenizer=tokenizer_fingerprint(tokenizer),
        environment=environment(model, device),
        token_texts=alternative_texts(prompts, texts),
    )
    return actual, tuple(preferences)


def _forced_prompt(
    p: PromptTrace,
    prompt_ids: tuple[int, ...],
    b: int,
    values: dict[str, list[list[Any]]],
    texts: dict[int, str],
    greedy: bool,
) -> tuple[PromptTrace, Preference | None]:
    """One prompt's teacher-forced path; for greedy traces it ends at the first step whose argmax moved."""
    steps: list[Step] = []
    finish = p.finish_reason
    preference = None
    # The values come from float32 tensors (see teacher_force_with_preferences): float32 already, no re-rounding.
    logprobs, scores, bests, lses = values["logprob"][b], values["score"][b], values["best"][b], values["lse"][b]
    top_ids, top_vals, argmax = values["top_ids"][b], values["top_vals"][b], values["argmax"][b]
    for t, recorded in enumerate(p.steps):
        top = (tuple(top_ids[t]), tuple(top_vals[t]))
        best = bests[t]
        preferred = argmax[t]
        if greedy and preferred != recorded.token_id:
            # The model now prefers another token: re-generation would diverge here and nothing after counts.
            steps.append(
                Step(
                    token_id=preferred,
                    token=texts.get(preferred, ""),
                    logprob=values["argmax_logprob"][b][t],
                    score=best,
                    top_ids=top[0],
                    top_logprobs=top[1],
                    best_score=best,
                    lse=lses[t],
                )
            )
            preference = Preference(
                prompt_index=b,
                step=t,
                recorded_id=recorded.token_id,
                recorded_token=recorded.token,
                recorded_logprob=recorded.logprob,
                recorded_logprob_now=logprobs[t],
                preferred_id=preferred,
                preferred_token=steps[-1].token,
                preferred_logprob=steps[-1].logprob,
            )
            finish = "stop"
            break
        steps.append(
            Step(
                token_id=recorded.token_id,
                token=recorded.token,
                logprob=logprobs[t],
                score=scores[t],
                top_ids=top[0],
                top_logprobs=top[1],
                best_score=best,
                lse=lses[t],
            )
        )
    forced = PromptTrace(
        prompt=p.prompt,
        prompt_ids=prompt_ids,
        steps=tuple(steps),
        finish_reason=finish,
        text=p.text,
        messages=p.messages,
        from_ids=p.from_ids,
    )
    return forced, preference
