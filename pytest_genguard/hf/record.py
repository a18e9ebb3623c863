"""`record()`: one batched `generate()` call, captured as a `GenerationTrace`.

Raw logits (`output_logits=True`) give each step's top-k of log-softmax; processed scores (`output_scores=True`) give
the score decoding actually used for the chosen token. Both need `return_dict_in_generate=True`.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
import numbers
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_genguard.core.trace import GenerationTrace, JSONScalar, PromptTrace, Step
from pytest_genguard.hf import inputs as checks

if TYPE_CHECKING:
    import torch
    from transformers import GenerationConfig, PreTrainedModel, PreTrainedTokenizerBase

# Generation settings that change what is generated; stored in every trace so a changed test is told from a change
# of the model.
SETTING_KEYS: tuple[str, ...] = (
    "max_new_tokens",
    "min_new_tokens",
    "do_sample",
    "num_beams",
    "temperature",
    "top_k",
    "top_p",
    "typical_p",
    "min_p",
    "repetition_penalty",
    "no_repeat_ngram_size",
    "length_penalty",
    "early_stopping",
    "use_cache",
)


@dataclass(frozen=True)
class _Prepared:
    config: GenerationConfig
    model_kwargs: dict[str, Any]
    settings: dict[str, JSONScalar]


@functools.cache
def _byte_decoder() -> dict[str, int]:
    """The byte-level alphabet back to byte values; built once (it cost about as much as the rest of _token_texts)."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return {v: k for k, v in bytes_to_unicode().items()}


def _token_texts(tokenizer: PreTrainedTokenizerBase, ids: Sequence[int]) -> dict[int, str]:
    """Each id's exact text: byte-level tokens as their bytes (surrogate-escaped), others via decode()."""
    decoder = _byte_decoder()
    unique = sorted(set(ids))
    pieces = tokenizer.convert_ids_to_tokens(unique)
    specials = set(tokenizer.all_special_ids)
    out: dict[int, str] = {}
    for token_id, piece in zip(unique, pieces, strict=False):
        if piece is not None and token_id not in specials and all(ch in decoder for ch in piece):
            out[token_id] = bytes(decoder[ch] for ch in piece).decode("utf-8", "surrogateescape")
        else:
            out[token_id] = tokenizer.decode([token_id])
    return out


def _prepare(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, max_new_tokens: int, generate_kwargs: dict[str, Any]
) -> _Prepared:
    """A copy of the generation config with the call's settings; the model's own config is never mutated."""
    base = generate_kwargs.pop("generation_config", None) or model.generation_config
    config = copy.deepcopy(base)
    model_kwargs = config.update(**generate_kwargs)
    config.max_new_tokens = max_new_tokens
    config.return_dict_in_generate = True
    config.output_scores = True
    config.output_logits = True
    if config.pad_token_id is None:
        config.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if config.eos_token_id is None:
        config.eos_token_id = tokenizer.eos_token_id
    if getattr(config, "num_return_sequences", 1) not in (None, 1):
        raise ValueError(
            "record(): num_return_sequences must be 1 (one recorded path per prompt); record each sequence "
            "with its own seed instead."
        )
    checks.check_generation_config(config)
    settings = _settings(config)
    settings["max_new_tokens"] = max_new_tokens
    settings["mode"] = _mode(config)
    custom = processor_names(model_kwargs.get("logits_processor"))
    if custom is not None:  # stored only when given: traces without custom processors read as before
        settings["logits_processor"] = custom
    # EOS ids let assert_well_formed() check a stored trace's endings; several ids are kept as "2,7" (a scalar).
    eos_ids = sorted(_eos_ids(config))
    settings["eos_token_id"] = eos_ids[0] if len(eos_ids) == 1 else (",".join(map(str, eos_ids)) or None)
    return _Prepared(config=config, model_kwargs=dict(model_kwargs), settings=settings)


def processor_names(processors: Any) -> str | None:
    """The class names of custom logits processors (a `logits_processor=` argument), in the order they run, as one
    scalar ``"BanToken,Boost"``; None when there are none.

    A trace stores it as ``settings["logits_processor"]``: it tells readers (`assert_well_formed`) that the chosen
    tokens follow processed scores no recorded setting explains, makes a changed list of processors a settings change
    (the snapshot is stale), and lets `verify()` ask for the same processors. Only names are stored: a processor's
    parameters are the test's business, and a class renamed is a changed test.
    """
    if processors is None:
        return None
    items = list(processors) if isinstance(processors, (list, tuple)) else [processors]
    names = [p.__name__ if inspect.isroutine(p) else type(p).__name__ for p in items]
    return ",".join(names) if names else None


# Values that leave decoding as it is, and settings that act in one mode only: stored as None, so a trace reads the
# same whether a transformers version spells "unset" as None (5.x) or as the neutral default (4.5x fills them in).
_NEUTRAL: dict[str, JSONScalar] = {
    "do_sample": False,
    "num_beams": 1,
    "temperature": 1.0,
    "top_p": 1.0,
    "typical_p": 1.0,
    "min_p": 0.0,
    "repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "min_new_tokens": 0,
    "length_penalty": 1.0,
    "early_stopping": False,
    "use_cache": True,
}
_SAMPLING_ONLY = frozenset({"temperature", "top_k", "top_p", "typical_p", "min_p"})
_BEAM_ONLY = frozenset({"length_penalty", "early_stopping"})


def _settings(config: GenerationConfig) -> dict[str, JSONScalar]:
    """The decoding settings that change what is generated, normalized across transformers versions."""
    mode = _mode(config)
    settings: dict[str, JSONScalar] = {}
    for key in SETTING_KEYS:
        value = getattr(config, key, None)
        if not (isinstance(value, (bool, int, float, str)) or value is None):
            continue
        inactive = (key in _SAMPLING_ONLY and not getattr(config, "do_sample", False)) or (
            key in _BEAM_ONLY and mode != "beam"
        )
        neutral = key in _NEUTRAL and value == _NEUTRAL[key] and type(value) is type(_NEUTRAL[key])
        settings[key] = None if inactive or neutral else value
    return settings


def _mode(config: GenerationConfig) -> str:
    if (getattr(config, "num_beams", 1) or 1) > 1:
        return "beam"
    return "sample" if getattr(config, "do_sample", False) else "greedy"


@contextlib.contextmanager
def _recording_state(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, padding_side: str) -> Iterator[None]:
    """Eval mode, no_grad and the padding side for the call; everything restored afterwards."""
    import torch

    was_training = model.training
    # Switching modes walks every module twice: skip it when nothing is in training mode (the usual case here).
    switch = was_training or any(module.training for module in model.modules())
    old_side = tokenizer.padding_side
    if switch:
        model.eval()
    tokenizer.padding_side = padding_side
    try:
        with torch.no_grad():
            yield
    finally:
        tokenizer.padding_side = old_side
        if switch:
            model.train(was_training)


@contextlib.contextmanager
def seeded(seed: int | None, device: torch.device) -> Iterator[None]:
    """Seed torch for the block without disturbing the caller's RNG streams (a no-op for seed=None)."""
    import torch

    if seed is None:
        yield
        return
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


def _eos_ids(config: GenerationConfig) -> set[int]:
    eos = config.eos_token_id
    if eos is None:
        return set()
    return {int(e) for e in eos} if isinstance(eos, (list, tuple)) else {int(eos)}


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

    from pytest_genguard.hf.environment import environment
    from pytest_genguard.hf.fingerprint import model_fingerprint, tokenizer_fingerprint

    prompt_list, max_new_tokens, top_k, seed = _checked_arguments(model, prompts, max_new_tokens, top_k, seed)
    checks.check_generate_kwargs(generate_kwargs)
    encoder_decoder = bool(getattr(model.config, "is_encoder_decoder", False))
    prepared = _prepare(model, tokenizer, max_new_tokens, dict(generate_kwargs))
    device = next(model.parameters()).device
    if "stop_strings" in generate_kwargs or getattr(prepared.config, "stop_strings", None):
        prepared.model_kwargs.setdefault("tokenizer", tokenizer)
    with _recording_state(model, tokenizer, "right" if encoder_decoder else "left"):
        batch = _encode(tokenizer, prompt_list, prepared.config.pad_token_id, left=not encoder_decoder)
        mask = batch["attention_mask"].tolist()
        all_prompt_ids = [
            tuple(int(i) for i, m in zip(row, mask[b], strict=False) if m)
            for b, row in enumerate(batch["input_ids"].tolist())
        ]
        checks.check_prompt_tokens(model, prompt_list, all_prompt_ids, max_new_tokens)
        inputs = {"input_ids": batch["input_ids"].to(device), "attention_mask": batch["attention_mask"].to(device)}
        with seeded(seed, device):
            out = model.generate(
                **inputs,
                generation_config=prepared.config,
                **prepared.model_kwargs,
            )
        steps = _collect_steps(out, len(prompt_list), top_k)
    start = 1 if encoder_decoder else inputs["input_ids"].shape[1]
    generated = out.sequences[:, start:].tolist()
    lengths = _path_lengths(out)
    if lengths is not None:  # beam search: a hypothesis that ended early is followed by padding
        generated = [row[:n] for row, n in zip(generated, lengths, strict=True)]
    ids_in_trace = [i for row in generated for i in row] + [i for s in steps for i in s["top_ids_flat"]]
    texts = _token_texts(tokenizer, ids_in_trace)
    eos = _eos_ids(prepared.config)
    # Only a stopping criterion ends one sequence of the batch early (its tail is then padding); without one, a pad id
    # in the output was generated (an untrained model may well emit it).
    can_stop_early = bool(
        getattr(prepared.config, "stop_strings", None) or prepared.model_kwargs.get("stopping_criteria")
    )
    pad_id = prepared.config.pad_token_id if can_stop_early and isinstance(prepared.config.pad_token_id, int) else None
    prompt_traces = [
        _prompt_trace(prompt, all_prompt_ids[b], generated[b], steps, b, texts, eos, max_new_tokens, tokenizer, pad_id)
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


def alternative_texts(prompts: Sequence[PromptTrace], texts: dict[int, str]) -> dict[int, str]:
    """The texts of the top-k ids no step chose, so a reader of the trace can name every alternative."""
    chosen = {s.token_id for p in prompts for s in p.steps}
    shown = {i for p in prompts for s in p.steps for i in s.top_ids} - chosen
    return {i: texts[i] for i in sorted(shown) if i in texts}


def _checked_arguments(
    model: PreTrainedModel, prompts: Any, max_new_tokens: Any, top_k: Any, seed: Any
) -> tuple[list[str], int, int, int | None]:
    """record()'s own arguments, checked before anything reaches transformers (see `pytest_genguard.hf.inputs`)."""
    prompt_list = checks.prompt_list(prompts)
    max_new = checks.integer(max_new_tokens, "max_new_tokens", minimum=1)
    k = checks.integer(top_k, "top_k", minimum=1)
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral)):
        raise ValueError(f"record(): seed must be an integer or None, got {seed!r}.")
    checks.check_model(model)
    return prompt_list, max_new, k, None if seed is None else int(seed)


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
    from pytest_genguard.core.compare import tolerances_for
    from pytest_genguard.core.events import emit

    tie_tol = tolerances_for(trace.dtype).tie_tol
    steps = [s for p in trace for s in p.steps]
    fragile = [
        {"prompt": i, "text": p.prompt, "step": n, "margin": s.margin}
        for i, p in enumerate(trace)
        for n, s in enumerate(p.steps)
        if s.margin <= tie_tol
    ]
    # The first 50 are named in the summary (-v); the count is exact.
    emit("record", fragile_steps=len(fragile), fragile=fragile[:50], prompts=len(trace), steps=len(steps))


# Steps are processed as (steps, batch, vocab) blocks: a handful of tensor operations per block instead of eight per
# step (their fixed cost dominated record() for small models), in chunks so memory stays bounded for large vocabularies.
_CHUNK_ELEMENTS = 1 << 24
_FIELDS = ("chosen_logprob", "score", "best", "top_vals", "top_ids")


def _collect_steps(out: Any, batch_size: int, top_k: int) -> list[dict[str, Any]]:
    """Per step, for each prompt's returned path: chosen raw logprob, processed score, best score and raw top-k."""
    import torch

    logits: tuple[torch.Tensor, ...] = out.logits
    scores: tuple[torch.Tensor, ...] = out.scores
    n_steps = len(logits)
    if n_steps == 0:
        return []
    seq, beam_rows = _step_layout(out, n_steps)
    vocab = logits[0].shape[-1]
    k = min(top_k, vocab)
    chunk = max(1, _CHUNK_ELEMENTS // max(1, batch_size * vocab))
    parts: dict[str, list[torch.Tensor]] = {key: [] for key in _FIELDS}
    for first in range(0, n_steps, chunk):
        span = range(first, min(n_steps, first + chunk))
        if beam_rows is not None:
            rows = [beam_rows[:, t] for t in span]
            raw_logits = torch.stack([logits[t][r] for t, r in zip(span, rows, strict=True)])
            processed = torch.stack([scores[t][r] for t, r in zip(span, rows, strict=True)]).float()
        else:
            raw_logits = torch.stack([logits[t][:batch_size] for t in span])
            processed = torch.stack([scores[t][:batch_size] for t in span]).float()
        raw = torch.log_softmax(raw_logits.float(), dim=-1)
        chosen = seq[:, span.start : span.stop].T[:, :, None]
        top_vals, top_ids = raw.topk(k, dim=-1)
        parts["chosen_logprob"].append(raw.gather(2, chosen).squeeze(2))
        parts["score"].append(processed.gather(2, chosen).squeeze(2))
        parts["best"].append(processed.max(dim=-1).values)
        parts["top_vals"].append(top_vals)
        parts["top_ids"].append(top_ids)
    # One device->host transfer per field, not per step.
    lists = {key: torch.cat(values).cpu().tolist() for key, values in parts.items()}
    steps: list[dict[str, Any]] = [{key: lists[key][t] for key in _FIELDS} for t in range(n_steps)]
    for s in steps:
        s["top_ids_flat"] = [i for row in s["top_ids"] for i in row]
    return steps


def _step_layout(out: Any, n_steps: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Each returned path's token at step t ([batch, n_steps]) and, for beam search, the row of ``scores[t]`` and
    ``logits[t]`` (``batch * num_beams`` rows) its step t came from.

    Without beams, ``sequences`` holds prompt + one column per step. With beams, ``generate()`` ran `n_steps` steps
    but returns each prompt's best finished hypothesis: ``beam_indices`` has one column per step of the *longest*
    returned hypothesis (``-1`` after a shorter one ended) and ``sequences`` ends with as many columns, fewer than
    `n_steps` whenever every returned hypothesis finished before the beams still running did. Columns past a path's
    end are filled with 0 (token and row): they are computed but never read (`_path_lengths` cuts each path).
    """
    import torch

    beam_indices = getattr(out, "beam_indices", None)
    if beam_indices is None:
        return out.sequences[:, out.sequences.shape[1] - n_steps :], None
    width = min(beam_indices.shape[1], n_steps)
    seq = out.sequences[:, out.sequences.shape[1] - width :]
    rows = beam_indices[:, :width].long().clamp(min=0)
    if width < n_steps:
        pad = torch.zeros((seq.shape[0], n_steps - width), dtype=torch.long, device=seq.device)
        seq = torch.cat([seq, pad.to(seq.dtype)], dim=1)
        rows = torch.cat([rows, pad.to(rows.device)], dim=1)
    return seq, rows


def _path_lengths(out: Any) -> list[int] | None:
    """For beam search, how many steps each returned hypothesis has (its ``beam_indices`` entries that are not -1);
    None otherwise (every path then runs until EOS, a stopping criterion or max_new_tokens)."""
    beam_indices = getattr(out, "beam_indices", None)
    if beam_indices is None:
        return None
    return [int(n) for n in (beam_indices >= 0).sum(dim=1).tolist()]


def _prompt_trace(
    prompt: str,
    prompt_ids: tuple[int, ...],
    generated: list[int],
    steps: list[dict[str, Any]],
    b: int,
    texts: dict[int, str],
    eos: set[int],
    max_new_tokens: int,
    tokenizer: PreTrainedTokenizerBase,
    pad_id: int | None = None,
) -> PromptTrace:
    path: list[Step] = []
    finish = "length"
    # The values come from float32 tensors (see _collect_steps), so each is a float32 already: no float32() rounding.
    for t, token_id in enumerate(generated[: len(steps)]):
        s = steps[t]
        path.append(
            Step(
                token_id=int(token_id),
                token=texts[int(token_id)],
                logprob=s["chosen_logprob"][b],
                score=s["score"][b],
                top_ids=tuple(s["top_ids"][b]),
                top_logprobs=tuple(s["top_vals"][b]),
                best_score=s["best"][b],
            )
        )
        if int(token_id) in eos:
            finish = "eos"
            break
        if pad_id is not None and pad_id not in eos and all(i == pad_id for i in generated[t:]):
            path.pop()  # padding after a stopping criterion ended this sequence while others ran on
            break
    if finish != "eos" and len(path) < max_new_tokens:
        finish = "stop"  # ended early without EOS: a stopping criterion (stop_strings, max_time) ended it
    ids = [st.token_id for st in path if st.token_id not in eos]
    text = tokenizer.decode(ids, skip_special_tokens=True)
    return PromptTrace(prompt=prompt, prompt_ids=prompt_ids, steps=tuple(path), finish_reason=finish, text=text)
