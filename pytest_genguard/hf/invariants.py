"""Model invariants: properties every correct decoding stack has, checked by generating more than once.

- `assert_deterministic`: N runs give bitwise-identical traces (greedy runs from different RNG states, so dropout
  left on or a sampler hidden in a greedy path shows; sampling under one seed);
- `assert_batch_invariant`: a prompt generates the same alone and inside left-padded batches;
- `assert_cache_invariant`: the KV cache changes nothing (use_cache=True vs False);
- `assert_continuation_consistent`: k tokens then m more from prompt + those k ids equals k + m at once.
The processor contracts live in `processors.py`; `generate_from_ids` (record() from token ids) in `record.py`.
Torch-side: import only from test code, never from the plugin.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from pytest_genguard.core import events, validation
from pytest_genguard.core.checks import fail_or_pass
from pytest_genguard.core.compare import compare
from pytest_genguard.core.comparison import Comparison, describe, headline, window
from pytest_genguard.core.text import quote
from pytest_genguard.core.tolerances import EXACT, Tolerances
from pytest_genguard.core.trace import GenerationTrace, PromptTrace, dumps
from pytest_genguard.core.validation import prompt_list
from pytest_genguard.hf._generation import decoding
from pytest_genguard.hf.environment import model_device
from pytest_genguard.hf.record import generate_from_ids, record
from pytest_genguard.hf.tiny import corpus_texts

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = [
    "assert_batch_invariant",
    "assert_cache_invariant",
    "assert_continuation_consistent",
    "assert_deterministic",
]


_EXPLAIN_LINES = 60
"""Message lines shown for a model invariant: the divergence, its step window, per failing batch size."""


def _record(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: list[str], **kw: Any
) -> GenerationTrace:
    """`record()` without its events: an invariant's internal runs are not the test's recordings."""
    with events.muted():
        return record(model, tokenizer, prompts, **kw)


def _explain(cmp: Comparison, expected: str, actual: str) -> list[str]:
    """The first divergence of `cmp` in words and as a step window, with what "expected"/"actual" stand for."""
    div = headline(cmp)
    if div is None:
        return [f"(the traces differ outside the compared fields; expected = {expected}, actual = {actual})"]
    return [f"{div.verdict}: {describe(cmp, div)}", f"(expected = {expected}, actual = {actual})", *window(cmp, div)]


@contextlib.contextmanager
def _rng_state(seed: int, device: torch.device) -> Iterator[None]:
    """Seed torch, `random` and numpy for the block; the caller's RNG states are restored afterwards."""
    import torch

    py_state = random.getstate()
    np_random: Any = None
    with contextlib.suppress(ImportError):
        import numpy

        np_random = numpy.random
    np_state = np_random.get_state() if np_random is not None else None
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        random.seed(seed)
        if np_random is not None:
            np_random.seed(seed % 2**32)
        try:
            yield
        finally:
            random.setstate(py_state)
            if np_random is not None:
                np_random.set_state(np_state)


def assert_deterministic(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: str | Sequence[str],
    *,
    runs: int = 5,
    max_new_tokens: int = 16,
    top_k: int = 5,
    seed: int = 0,
    **generate_kwargs: Any,
) -> None:
    """Fail unless `runs` generations are bitwise identical (`compare` with zero tolerances): the check is exact.

    Each run starts from a different torch/random/numpy RNG state (the caller's state is restored), so anything
    random in a greedy or beam path shows: dropout active at inference, a logits processor that samples. Sampling
    runs (do_sample=True) all use `seed`, so they must repeat exactly too. The message counts the unique outputs
    (SGLang's measure: "3 unique outputs in 5 runs") and shows the first differing step.
    """
    __tracebackhide__ = True
    name = "assert_deterministic"
    plist = prompt_list(prompts, where=name)
    if runs < 2:
        raise ValueError(f"{name}: runs must be >= 2 to compare anything, got {runs}")
    mode, sampling = decoding(model, tokenizer, generate_kwargs)
    device = model_device(model)
    traces = []
    for run in range(runs):
        with _rng_state(10_007 * (run + 1) + seed, device):
            traces.append(
                _record(
                    model,
                    tokenizer,
                    plist,
                    max_new_tokens=max_new_tokens,
                    top_k=top_k,
                    seed=seed if sampling else None,
                    **generate_kwargs,
                )
            )
    outputs = Counter(dumps(GenerationTrace(prompts=t.prompts)) for t in traces)
    paths = Counter(tuple(p.token_ids for p in t.prompts) for t in traces)
    problems: list[str] = []
    how = "each run under the same seed" if sampling else "each run from a different RNG state"
    head = f"{len(outputs)} unique outputs in {runs} runs ({len(paths)} unique token paths; {mode}, {how}; bitwise)"
    if len(outputs) > 1:
        first = dumps(GenerationTrace(prompts=traces[0].prompts))
        other = next(i for i, t in enumerate(traces) if dumps(GenerationTrace(prompts=t.prompts)) != first)
        cmp = compare(traces[0], traces[other], tolerances=EXACT)
        problems = _explain(cmp, "run 0", f"run {other}")
    advice = (
        "Something random runs at inference: dropout that ignores model.eval(), a logits processor that samples, "
        "or nondeterministic kernels (torch.use_deterministic_algorithms(True); on CUDA CUBLAS_WORKSPACE_CONFIG="
        ":4096:8 set before CUDA starts)."
    )
    fail_or_pass(name, problems, head, advice, max_shown=_EXPLAIN_LINES)


def _check_tolerances(tolerances: Tolerances | None, name: str) -> None:
    if tolerances is not None and not isinstance(tolerances, Tolerances):
        raise TypeError(f"{name}: tolerances must be a pytest_genguard.Tolerances or None, got {tolerances!r}")


def _default_fillers() -> list[str]:
    return corpus_texts()


def assert_batch_invariant(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: str | Sequence[str],
    *,
    batch_sizes: Sequence[int] = (2, 4),
    seed: int = 0,
    fillers: Sequence[str] | None = None,
    tolerances: Tolerances | None = None,
    max_new_tokens: int = 16,
    top_k: int = 5,
    **generate_kwargs: Any,
) -> None:
    """Fail when a prompt generates differently inside a batch than alone (a padding or attention-mask bug).

    Each prompt is generated alone, then once per batch size at a random position (seeded by `seed`) among
    `fillers` (default: the shipped corpus sentences), at least one of them longer so the prompt is padded (left
    padding for decoder-only models). Only the prompt's own tokens are compared (record() strips padding), with the
    tolerant rule and the dtype's default tolerances (or `tolerances`): batched kernels reduce in a different order,
    so even float32 on CPU is not bitwise (measured on the tiny models: max |diff| 5e-7 to 6e-6).
    Greedy and beam search only: sampled draws depend on the batch.
    """
    __tracebackhide__ = True
    name = "assert_batch_invariant"
    plist = prompt_list(prompts, where=name)
    _check_tolerances(tolerances, name)
    if not batch_sizes or any(isinstance(b, bool) or not isinstance(b, int) or b < 2 for b in batch_sizes):
        raise ValueError(f"{name}: batch_sizes must be integers >= 2, got {batch_sizes!r}")
    if decoding(model, tokenizer, generate_kwargs)[1]:
        raise ValueError(f"{name}: sampling draws depend on the batch; check greedy or beam search (do_sample=False)")
    pool = [f for f in (fillers if fillers is not None else _default_fillers()) if f not in plist]
    if not pool:
        raise ValueError(f"{name}: fillers must hold at least one text that is not one of the prompts")
    kw = dict(max_new_tokens=max_new_tokens, top_k=top_k, **generate_kwargs)
    alone = [_record(model, tokenizer, [p], **kw) for p in plist]
    expected = dataclasses.replace(alone[0], prompts=tuple(t.prompts[0] for t in alone))
    lengths = {text: len(tokenizer(text)["input_ids"]) for text in {*plist, *pool}}
    rng = random.Random(seed)
    problems: list[str] = []
    head = ""
    for size in batch_sizes:
        rows: list[PromptTrace] = []
        placed: list[str] = []
        for prompt in plist:
            others = [rng.choice(pool) for _ in range(size - 1)]
            longest = max(pool, key=lambda text: lengths[text])
            if all(lengths[o] <= lengths[prompt] for o in others) and lengths[longest] > lengths[prompt]:
                others[rng.randrange(size - 1)] = longest
            position = rng.randrange(size)
            batch = [*others[:position], prompt, *others[position:]]
            rows.append(_record(model, tokenizer, batch, **kw).prompts[position])
            padding = max(lengths[t] for t in batch) - lengths[prompt]
            placed.append(f"at position {position} of a batch of {size}, padded by {padding} tokens")
        cmp = compare(expected, dataclasses.replace(expected, prompts=tuple(rows)), tolerances=tolerances)
        div = headline(cmp)
        if cmp.ok or div is None:
            continue
        where = f"prompt {div.prompt_index} {quote(div.prompt, 40)} {placed[div.prompt_index]}"
        head = head or f"{where} generates differently than alone ({_tol(cmp)})"
        problems.append(f"batch size {size}: {where}:")
        problems += [f"  {line}" for line in _explain(cmp, "alone", "in the batch")]
    advice = (
        "Padded positions must be masked out of attention and skipped by the position ids; decoder-only models "
        "need left padding. Check custom attention code, the attention_mask passed to forward, and the padding side."
    )
    fail_or_pass(name, problems, head, advice, max_shown=_EXPLAIN_LINES)


def _tol(cmp: Comparison) -> str:
    return "bitwise" if cmp.tolerances == EXACT else f"tolerant rule: {cmp.tolerances}"


def assert_cache_invariant(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: str | Sequence[str],
    *,
    tolerances: Tolerances | None = None,
    max_new_tokens: int = 16,
    top_k: int = 5,
    seed: int = 0,
    **generate_kwargs: Any,
) -> None:
    """Fail when generating with the KV cache differs from generating without it (a cache bug).

    use_cache=False recomputes every step from the whole sequence: the reference. The two take different kernels
    (one query row against cached keys vs the full square), so they are compared with the tolerant rule and the
    dtype's default tolerances (or `tolerances`), not bitwise (tiny models, float32 CPU: max |diff| up to 5e-6).
    Sampling runs both use `seed`.
    """
    __tracebackhide__ = True
    name = "assert_cache_invariant"
    plist = prompt_list(prompts, where=name)
    _check_tolerances(tolerances, name)
    if "use_cache" in generate_kwargs:
        raise ValueError(f"{name}: do not pass use_cache; the check runs both use_cache=True and use_cache=False")
    sample_seed = seed if decoding(model, tokenizer, generate_kwargs)[1] else None
    kw = dict(max_new_tokens=max_new_tokens, top_k=top_k, seed=sample_seed, **generate_kwargs)
    cached = _record(model, tokenizer, plist, use_cache=True, **kw)
    uncached = _record(model, tokenizer, plist, use_cache=False, **kw)
    cmp = compare(dataclasses.replace(uncached, settings=cached.settings), cached, tolerances=tolerances)
    problems = [] if cmp.ok else _explain(cmp, "use_cache=False", "use_cache=True")
    head = f"generating with the KV cache differs from generating without it ({_tol(cmp)})" if problems else ""
    advice = (
        "The KV cache must hold exactly what a full forward pass would compute: check custom cache classes, how the "
        "forward's cache argument is handled (`cache` since transformers 5.24, `past_key_values` before) and the "
        "positions of incremental steps."
    )
    fail_or_pass(name, problems, head, advice, max_shown=_EXPLAIN_LINES)


def assert_continuation_consistent(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: str | Sequence[str],
    *,
    k: int = 4,
    m: int = 4,
    tolerances: Tolerances | None = None,
    top_k: int = 5,
    **generate_kwargs: Any,
) -> None:
    """Fail when generating k tokens, then m more from prompt + those k token ids, differs from k + m at once.

    The continuation starts from ids, not decoded text (text would re-tokenize differently). It processes the k
    tokens in one prefill where the one-shot run fed them one at a time, so it is compared with the tolerant rule
    and the dtype's defaults (or `tolerances`). Greedy only (a sampled or beam continuation is another draw);
    min_new_tokens carries over (min_new_tokens - k for the continuation). Prompts that end within k tokens are
    skipped; if all do, that is an error.
    """
    __tracebackhide__ = True
    name = "assert_continuation_consistent"
    plist = prompt_list(prompts, where=name)
    _check_tolerances(tolerances, name)
    k = validation.integer(k, "k", minimum=1, where=name)
    m = validation.integer(m, "m", minimum=1, where=name)
    if decoding(model, tokenizer, generate_kwargs)[0] != "greedy":
        raise ValueError(f"{name}: only greedy decoding continues deterministically; drop do_sample/num_beams")
    full = _record(model, tokenizer, plist, max_new_tokens=k + m, top_k=top_k, **generate_kwargs)
    todo = [i for i, p in enumerate(full.prompts) if len(p.steps) > k]
    if not todo:
        raise ValueError(f"{name}: every prompt ends within k={k} tokens; nothing to continue: use a smaller k")
    encoder_decoder = bool(getattr(model.config, "is_encoder_decoder", False))
    prefix = [list(full.prompts[i].token_ids[:k]) for i in todo]
    rows = [list(full.prompts[i].prompt_ids) + ([] if encoder_decoder else prefix[j]) for j, i in enumerate(todo)]
    decoder_rows = None
    if encoder_decoder:
        start_id = getattr(model.generation_config, "decoder_start_token_id", None)
        start_id = start_id if isinstance(start_id, int) else model.config.decoder_start_token_id
        decoder_rows = [[int(start_id), *ids] for ids in prefix]
    kw = dict(generate_kwargs)
    min_new = kw.get("min_new_tokens")
    if isinstance(min_new, int) and min_new:
        kw["min_new_tokens"] = max(min_new - k, 0)
    with events.muted():
        cont, _, _ = generate_from_ids(
            model,
            tokenizer,
            [plist[i] for i in todo],
            rows,
            decoder_rows=decoder_rows,
            max_new_tokens=m,
            top_k=top_k,
            **kw,
        )
    rows_out = list(full.prompts)
    for j, i in enumerate(todo):
        p = full.prompts[i]
        rows_out[i] = dataclasses.replace(
            p, steps=p.steps[:k] + cont.prompts[j].steps, finish_reason=cont.prompts[j].finish_reason
        )
    cmp = compare(full, dataclasses.replace(full, prompts=tuple(rows_out)), tolerances=tolerances)
    problems = [] if cmp.ok else _explain(cmp, f"{k + m} tokens at once", f"{k} tokens, then continued from their ids")
    head = f"continuing after {k} tokens differs from generating {k + m} at once ({_tol(cmp)})" if problems else ""
    advice = (
        "A prefill of several tokens must compute what one-token decode steps computed: check the position ids of "
        "incremental steps (and `cache_position`, before transformers 5.24), and attention masks of multi-token "
        "forwards."
    )
    fail_or_pass(name, problems, head, advice, max_shown=_EXPLAIN_LINES)
