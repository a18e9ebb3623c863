"""The generation helpers `record()`, `generate_from_ids`, teacher forcing and the invariants share (private to
`pytest_genguard.hf`): a copy of the generation config with the call's settings and their normalized trace form,
exact token texts, the inference and RNG contexts, and turning `generate()`'s output into trace steps.

torch and transformers are imported inside the functions that use them, so that importing this module stays cheap.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_genguard.core.jsontext import JSONScalar
from pytest_genguard.core.trace import PromptTrace, Step, Support
from pytest_genguard.hf import inputs as checks, raw_logits_guard
from pytest_genguard.hf.decoding_settings import SETTING_KEYS, float_setting, int_setting, mode, trace_settings
from pytest_genguard.hf.kernel_limits import named_failure

if TYPE_CHECKING:
    import torch
    from transformers import GenerationConfig, PreTrainedModel, PreTrainedTokenizerBase

__all__ = [
    "SETTING_KEYS",
    "Prepared",
    "alternative_texts",
    "collect_steps",
    "decoding",
    "eos_ids",
    "float_setting",
    "inference",
    "int_setting",
    "length_clash_muted",
    "path_lengths",
    "prepare",
    "processor_names",
    "prompt_trace",
    "seeded",
    "token_texts",
]


@dataclass(frozen=True)
class Prepared:
    """A generation config for one call, the model kwargs it leaves, and the settings a trace stores."""

    config: GenerationConfig
    model_kwargs: dict[str, Any]
    settings: dict[str, JSONScalar]


@functools.cache
def _byte_decoder() -> dict[str, int]:
    """The byte-level alphabet back to byte values; built once (it cost about as much as the rest of _token_texts)."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return {v: k for k, v in bytes_to_unicode().items()}


def token_texts(tokenizer: PreTrainedTokenizerBase, ids: Sequence[int]) -> dict[int, str]:
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


def prepare(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, max_new_tokens: int, generate_kwargs: dict[str, Any]
) -> Prepared:
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
    settings = trace_settings(config)
    settings["max_new_tokens"] = max_new_tokens
    settings["mode"] = mode(config)
    custom = processor_names(model_kwargs.get("logits_processor"))
    if custom is not None:  # stored only when given: traces without custom processors read as before
        settings["logits_processor"] = custom
        # Processors that write in place get a copy: the raw logits generate() keeps stay the model's.
        model_kwargs["logits_processor"] = raw_logits_guard.guarded(model_kwargs["logits_processor"])
    # EOS ids let assert_well_formed() check a stored trace's endings; several ids are kept as "2,7" (a scalar).
    eos = sorted(eos_ids(config))
    settings["eos_token_id"] = eos[0] if len(eos) == 1 else (",".join(map(str, eos)) or None)
    return Prepared(config=config, model_kwargs=dict(model_kwargs), settings=settings)


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


@contextlib.contextmanager
def inference(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase | None = None, padding_side: str | None = None
) -> Iterator[None]:
    """Eval mode and no_grad (and, with `tokenizer`, its padding side) for the block; everything restored afterwards.
    A kernel set that cannot run the model's attention raises `KernelSetUnsupported` (`hf.kernel_limits`)."""
    import torch

    was_training = bool(getattr(model, "training", False))
    # Switching modes walks every module twice: skip it when nothing is in training mode (the usual case here).
    # A model without torch modules (optimum's ONNX Runtime / OpenVINO classes) has no mode to switch.
    modules = model.modules() if hasattr(model, "modules") else ()
    switch = was_training or any(module.training for module in modules)
    old_side = tokenizer.padding_side if tokenizer is not None else None
    if switch:
        model.eval()
    if tokenizer is not None and padding_side is not None:
        tokenizer.padding_side = padding_side
    try:
        with torch.no_grad():
            yield
    except RuntimeError as exc:
        named = named_failure(exc, model)
        if named is None:
            raise
        raise named from exc
    finally:
        if tokenizer is not None:
            tokenizer.padding_side = old_side
        if switch:
            model.train(was_training)


@contextlib.contextmanager
def seeded(seed: int | None, device: torch.device | Sequence[torch.device]) -> Iterator[None]:
    """Seed torch for the block without disturbing the caller's RNG streams (a no-op for seed=None); `device`: where
    the model computes (every CUDA device of a model dispatched over several, whose streams manual_seed resets)."""
    import torch

    if seed is None:
        yield
        return
    devices = [d for d in ([device] if isinstance(device, torch.device) else device) if d.type == "cuda"]
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


class _LengthClash(logging.Filter):
    """Drops transformers' "Both `max_new_tokens` (=8) and `max_length`(=20) seem to have been set" warning."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Both `max_new_tokens`")


@contextlib.contextmanager
def length_clash_muted() -> Iterator[None]:
    """Mute transformers' warning that max_new_tokens overrides the model's max_length, for genguard's own calls:
    record() always passes max_new_tokens, on purpose, so the warning says nothing the user can act on (and the
    recorder's calls would print it into every training log). Other warnings still show."""
    logger = logging.getLogger("transformers.generation.utils")
    muted = _LengthClash()
    logger.addFilter(muted)
    try:
        yield
    finally:
        logger.removeFilter(muted)


def eos_ids(config: GenerationConfig) -> set[int]:
    """The EOS ids of a generation config."""
    eos = config.eos_token_id
    if eos is None:
        return set()
    return {int(e) for e in eos} if isinstance(eos, (list, tuple)) else {int(eos)}


def alternative_texts(prompts: Sequence[PromptTrace], texts: dict[int, str]) -> dict[int, str]:
    """The texts of the top-k ids no step chose, so a reader of the trace can name every alternative."""
    chosen = {s.token_id for p in prompts for s in p.steps}
    shown = {i for p in prompts for s in p.steps for i in s.top_ids} - chosen
    return {i: texts[i] for i in sorted(shown) if i in texts}


# Steps are processed as (steps, batch, vocab) blocks: a handful of tensor operations per block instead of eight per
# step (their fixed cost dominated record() for small models), in chunks so memory stays bounded for large vocabularies.
_CHUNK_ELEMENTS = 1 << 19
_LSE_BLOCK_ELEMENTS = 1 << 18
"""Rows of logits per float64 block of the log-sum-exp: about 2 MB, so the float64 copy stays in the CPU's cache."""
_FIELDS = ("chosen_logprob", "lse", "score", "best", "top_vals", "top_ids")


@dataclass(frozen=True)
class Float64LogSoftmax:
    """Raw logprobs computed in float64 and stored as float32, for `record()` and `verify()` alike.

    float32 rounds ``logit - lse`` at the scale of the logits (an ulp of 13 is 1e-6, more than a confident token's
    whole float32 allowance), and kernel sets that round differently (AVX2 and AVX-512) made that rounding read as a
    changed model. In float64 the only rounding left is the final one to float32, at the scale of the logprob.
    """

    logits: torch.Tensor  # [..., V] float32 logits
    lse: torch.Tensor  # [...] float64 log-sum-exp
    top_logits: torch.Tensor  # [..., k] the k largest logits, best first (`top_k_of`)
    top_ids: torch.Tensor  # [..., k] their ids

    @classmethod
    def of(cls, logits: torch.Tensor, k: int) -> Float64LogSoftmax:
        """The top-`k` logits first, then the log-sum-exp with their first (the row's maximum: no pass of its own).

        Only the log-sum-exp needs every logit in float64; it is computed a cache-sized block of rows at a time (a
        float64 copy of a 152k-token vocabulary for every step cost more than generate() itself), with
        `torch.logsumexp`'s own steps (max, shifted exp, sum, log, max added back), so its bits are the same."""
        import torch

        logits = logits.float()
        vocab = logits.shape[-1]
        top_logits, top_ids = top_k_of(logits, min(k, vocab))
        rows = logits.reshape(-1, vocab)
        n = rows.shape[0]
        maxima = top_logits[..., 0].reshape(n, 1).double()
        maxima.masked_fill_(maxima.abs() == math.inf, 0.0)  # as torch.logsumexp: an infinite max is not subtracted
        sums = torch.empty(n, dtype=torch.float64, device=logits.device)
        # With several threads, at least two rows a block: torch splits a lone row's sum across threads (another
        # summation order), while it sums several rows one per thread, as torch.logsumexp over the whole tensor does.
        # With one thread a row is summed alone either way, and a 152k-token row's float64 copy stays in the cache.
        least = 1 if torch.get_num_threads() == 1 else 2
        step = max(least, _LSE_BLOCK_ELEMENTS // max(1, vocab))
        starts = list(range(0, n, step))
        if least > 1 and len(starts) > 1 and n - starts[-1] == 1:
            starts.pop()  # the last row joins the block before it
        for first, stop in zip(starts, [*starts[1:], n], strict=True):
            shifted = rows[first:stop].double().sub_(maxima[first:stop]).exp_()
            torch.sum(shifted, dim=-1, out=sums[first:stop])
        lse = sums.log_().add_(maxima.squeeze(-1))  # elementwise: the same bits as block by block
        return cls(logits, lse.reshape(logits.shape[:-1]), top_logits, top_ids)

    def at(self, index: torch.Tensor) -> torch.Tensor:
        """The logprobs of the ids in `index` ([..., 1]) as float32, the last dimension squeezed."""
        return (self.logits.gather(-1, index).squeeze(-1).double() - self.lse).float()

    def top(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The top-k logprobs (float32) and their ids."""
        return (self.top_logits.double() - self.lse.unsqueeze(-1)).float(), self.top_ids


_TOPK_BLOCK = 256
_TOPK_BLOCKED_FROM = 1 << 15
"""Vocabularies from this size on take their top-k from blocks (`top_k_of`); smaller ones from torch.topk alone."""


def top_k_of(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The `k` largest values along the last dimension and their ids, best first, as `torch.topk` gives them.

    On a large vocabulary `torch.topk` over every row was the largest part of what record() added to generate()
    (28 ms of 60 at 151,936 tokens). Every one of the k largest values lies in one of the k blocks (of 256) with the
    largest maxima (k blocks with a larger maximum would hold k larger values), so the maxima of the blocks are taken
    in one vectorized pass and torch.topk runs over those k blocks only. record() and verify() both take it here.
    """
    import torch

    vocab = logits.shape[-1]
    if vocab < _TOPK_BLOCKED_FROM or k * _TOPK_BLOCK >= vocab:
        values, ids = logits.topk(k, dim=-1)
        return values, ids
    full = vocab // _TOPK_BLOCK
    lead = logits.shape[:-1]
    maxima = logits[..., : full * _TOPK_BLOCK].reshape(*lead, full, _TOPK_BLOCK).amax(dim=-1)
    if full * _TOPK_BLOCK < vocab:  # a shorter last block
        maxima = torch.cat([maxima, logits[..., full * _TOPK_BLOCK :].amax(dim=-1, keepdim=True)], dim=-1)
    best_blocks = maxima.topk(k, dim=-1).indices  # [..., k]
    offsets = torch.arange(_TOPK_BLOCK, device=logits.device)
    candidates = (best_blocks.unsqueeze(-1) * _TOPK_BLOCK + offsets).flatten(-2)  # [..., k * block]
    beyond = candidates >= vocab  # past the end of the shorter last block: never chosen over a real value
    candidates = candidates.clamp(max=vocab - 1)
    values, picked = logits.gather(-1, candidates).masked_fill(beyond, -math.inf).topk(k, dim=-1)
    return values, candidates.gather(-1, picked)


def collect_steps(out: Any, batch_size: int, top_k: int) -> list[dict[str, Any]]:
    """Per step, for each prompt's returned path: chosen raw logprob, the log-sum-exp of the raw logits, processed
    score, best score and raw top-k."""
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
        # No processor ran when generate() kept one tensor as both (greedy without processors): the processed scores
        # are then the raw logits, and their best is the top-1 logit (a pass over the vocabulary saved).
        unprocessed = all(scores[t] is logits[t] for t in span)
        if beam_rows is not None:
            rows = [beam_rows[:, t] for t in span]
            raw_logits = _steps_of([logits[t][r] for t, r in zip(span, rows, strict=True)])
            processed = _steps_of([scores[t][r] for t, r in zip(span, rows, strict=True)]).float()
        else:
            raw_logits = _steps_of([logits[t][:batch_size] for t in span])
            processed = raw_logits if unprocessed else _steps_of([scores[t][:batch_size] for t in span]).float()
        soft = Float64LogSoftmax.of(raw_logits, k)
        chosen = seq[:, span.start : span.stop].T[:, :, None]
        top_vals, top_ids = soft.top()
        parts["chosen_logprob"].append(soft.at(chosen))
        parts["lse"].append(soft.lse.float())
        parts["score"].append(processed.gather(2, chosen).squeeze(2))
        best = soft.top_logits[..., 0] if unprocessed and beam_rows is None else processed.max(dim=-1).values
        parts["best"].append(best)
        parts["top_vals"].append(top_vals)
        parts["top_ids"].append(top_ids)
    # One device->host transfer per field, not per step.
    lists = {key: torch.cat(values).cpu().tolist() for key, values in parts.items()}
    steps: list[dict[str, Any]] = [{key: lists[key][t] for key in _FIELDS} for t in range(n_steps)]
    for s in steps:
        s["top_ids_flat"] = [i for row in s["top_ids"] for i in row]
    return steps


def _steps_of(tensors: list[torch.Tensor]) -> torch.Tensor:
    """Steps' [batch, vocab] tensors as one [steps, batch, vocab] tensor; one step as a view (a 152k-token
    vocabulary's copy per step cost as much as the log-sum-exp)."""
    import torch

    return tensors[0].unsqueeze(0) if len(tensors) == 1 else torch.stack(tensors)


def _step_layout(out: Any, n_steps: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Each returned path's token at step t ([batch, n_steps]) and, for beam search, the row of ``scores[t]`` and
    ``logits[t]`` (``batch * num_beams`` rows) its step t came from.

    Without beams, ``sequences`` holds prompt + one column per step. With beams, ``generate()`` ran `n_steps` steps
    but returns each prompt's best finished hypothesis: ``beam_indices`` has one column per step of the *longest*
    returned hypothesis (``-1`` after a shorter one ended) and ``sequences`` ends with as many columns, fewer than
    `n_steps` whenever every returned hypothesis finished before the beams still running did. Columns past a path's
    end are filled with 0 (token and row): they are computed but never read (`path_lengths` cuts each path).
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


def path_lengths(out: Any) -> list[int] | None:
    """For beam search, how many steps each returned hypothesis has (its ``beam_indices`` entries that are not -1);
    None otherwise (every path then runs until EOS, a stopping criterion or max_new_tokens)."""
    beam_indices = getattr(out, "beam_indices", None)
    if beam_indices is None:
        return None
    return [int(n) for n in (beam_indices >= 0).sum(dim=1).tolist()]


def prompt_trace(
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
    supports: Sequence[Sequence[Support]] | None = None,
) -> PromptTrace:
    """One prompt's trace from its generated ids and the collected steps (`supports`: a sampled run's, per step and
    prompt)."""
    path: list[Step] = []
    finish = "length"
    # The values come from float32 tensors (see collect_steps), so each is a float32 already: no float32() rounding.
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
                lse=s["lse"][b],
                support=None if supports is None else supports[t][b],
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


def decoding(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, generate_kwargs: dict[str, Any]
) -> tuple[str, bool]:
    """("greedy" | "sample" | "beam", whether it samples) for these generate kwargs on this model (beam search may
    sample too)."""
    prepared = prepare(model, tokenizer, 1, dict(generate_kwargs))
    return str(prepared.settings["mode"]), bool(prepared.config.do_sample)
