"""`assert_processor_contract`: logits processors do what their settings promise, on the scores generate() used.

Each contract runs its own `generate()` with that one setting and checks the raw logits (`output_logits`) against
the processed scores (`output_scores`) of every step, and the generated tokens, with the exact formulas transformers
documents. A broken or replaced processor (a transformers upgrade, a custom `LogitsProcessor`) shows at the first
step it gets wrong. Torch-side: import only from test code.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pytest_genguard.core import events, validation
from pytest_genguard.core.checks import fail_or_pass
from pytest_genguard.core.text import quote
from pytest_genguard.core.validation import prompt_list
from pytest_genguard.core.well_formed import eos_ids_from
from pytest_genguard.hf._generation import decoding, token_texts
from pytest_genguard.hf.record import generate_from_ids

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["assert_processor_contract", "banned_ngram_tokens"]

_MAX_PER_CONTRACT = 4
"""Problems listed per contract (the first steps that break it); the rest are counted."""


def banned_ngram_tokens(context: Sequence[int], n: int) -> set[int]:
    """The tokens that would complete an n-gram already in `context` (transformers' no-repeat-n-gram rule: the
    last n-1 tokens followed by any token that followed them before)."""
    if len(context) + 1 < n:
        return set()
    prefix = tuple(context[len(context) - n + 1 :]) if n > 1 else ()
    return {context[i + n - 1] for i in range(len(context) - n + 1) if tuple(context[i : i + n - 1]) == prefix}


class _Run:
    """One contract's generation: the trace, the raw and processed score tensors, and each row's token context."""

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, plist: list[str], **kw: Any) -> None:
        rows = [list(tokenizer(p)["input_ids"]) for p in plist]
        with events.muted():
            self.trace, self.out, self.start = generate_from_ids(model, tokenizer, plist, rows, **kw)
        self.tokenizer = tokenizer
        self._texts = token_texts
        self.sequences: list[list[int]] = self.out.sequences.tolist()
        encoder_decoder = bool(getattr(model.config, "is_encoder_decoder", False))
        # Left padding of each decoder-only row (the decoder side of an encoder-decoder model is not padded).
        self.padding = [0 if encoder_decoder else self.start - len(p.prompt_ids) for p in self.trace.prompts]

    def steps(self) -> list[tuple[int, int]]:
        """(row, step) pairs of every recorded step, row by row."""
        return [(b, t) for b, p in enumerate(self.trace.prompts) for t in range(len(p.steps))]

    def context(self, b: int, t: int) -> list[int]:
        """The ids the processors saw at step t of row b: left padding, prompt and the tokens generated so far."""
        return self.sequences[b][: self.start + t]

    def padding_only(self, b: int, t: int) -> set[int]:
        """Ids that occur in row b's context at step t only as left padding: transformers 5 leaves them out of the
        repetition penalty, 4.x counted them, so either is accepted. (Only the context so far: a finished row is
        padded with the same id later on.)"""
        pad = set(self.sequences[b][: self.padding[b]])
        return pad - set(self.context(b, t)[self.padding[b] :])

    def raw(self, b: int, t: int) -> torch.Tensor:
        logits: torch.Tensor = self.out.logits[t][b]
        return logits

    def processed(self, b: int, t: int) -> torch.Tensor:
        scores: torch.Tensor = self.out.scores[t][b]
        return scores

    def where(self, b: int, t: int, token_id: int | None = None) -> str:
        p = self.trace.prompts[b]
        text = f"prompt {b} {quote(p.prompt, 30)} step {t}"
        if token_id is not None:
            piece = self._texts(self.tokenizer, [token_id])[token_id]
            text += f", token {quote(piece, 16)} (id {token_id})"
        return text


def _mismatches(processed: torch.Tensor, expected: torch.Tensor) -> list[int]:
    import torch

    same = (processed == expected) | (torch.isnan(processed) & torch.isnan(expected))
    return [int(i) for i in torch.nonzero(~same).flatten().tolist()]


def _repetition_penalty(run: _Run, penalty: float) -> list[str]:
    import torch

    out: list[str] = []
    count = 0
    for b, t in run.steps():
        raw, processed = run.raw(b, t), run.processed(b, t)
        seen = torch.zeros(raw.shape[-1], dtype=torch.bool, device=raw.device)
        context = run.context(b, t)[run.padding[b] :]
        ids = torch.tensor([i for i in context if i < raw.shape[-1]], dtype=torch.long, device=raw.device)
        seen[ids] = True
        penalized = torch.where(raw < 0, raw * penalty, raw / penalty)
        expected = torch.where(seen, penalized, raw)
        either = run.padding_only(b, t)
        bad = [i for i in _mismatches(processed, expected) if not (i in either and bool(processed[i] == penalized[i]))]
        count += len(bad)
        if bad and len(out) < _MAX_PER_CONTRACT:
            i = bad[0]
            r, got, want = float(raw[i]), float(processed[i]), float(expected[i])
            if bool(seen[i]):
                rule = f"{'raw * ' if r < 0 else 'raw / '}{penalty:g}"
                what = f"seen token: raw logit {r:.6g} -> processed {got:.6g}, expected {want:.6g} ({rule})"
            else:
                what = f"unseen token changed: raw logit {r:.6g} -> processed {got:.6g} (must stay {want:.6g})"
            out.append(f"{run.where(b, t, i)}: {what}")
    if count > len(out):
        out.append(f"({count} score entries break the rule in all)")
    return out


def _no_repeat_ngram(run: _Run, n: int, encoder_decoder: bool, scores: bool) -> list[str]:
    """Banned tokens must score -inf (unless `scores` is False: beam scores are per beam), and no generated n-gram
    may occur earlier in prompt + output."""
    out: list[str] = []
    count = 0
    for b, t in run.steps() if scores else []:
        banned = banned_ngram_tokens(run.context(b, t), n)
        processed = run.processed(b, t)
        allowed = sorted(i for i in banned if i < processed.shape[-1] and float(processed[i]) != -math.inf)
        count += len(allowed)
        if allowed and len(out) < _MAX_PER_CONTRACT:
            i = allowed[0]
            out.append(
                f"{run.where(b, t, i)}: would repeat a {n}-gram but its processed score is {float(processed[i]):.6g}, "
                "not -inf"
            )
    for b, p in enumerate(run.trace.prompts):
        base = run.sequences[b][: run.start] if encoder_decoder else list(p.prompt_ids)
        seq = base + list(p.token_ids)
        for j in range(max(len(base), n - 1), len(seq)):
            gram = seq[j - n + 1 : j + 1]
            earlier = next((i for i in range(j - n + 1) if seq[i : i + n] == gram), None)
            if earlier is None:
                continue
            before = f"step {earlier - len(base)}" if earlier >= len(base) else f"prompt position {earlier}"
            gram_text = _ids_text(run, gram)
            out.append(f"{run.where(b, j - len(base))}: the generated {n}-gram {gram_text} already occurs at {before}")
            count += 1
            break  # the first repeat per prompt; later ones follow from it
    if count > len(out):
        out.append(f"({count} violations in all)")
    return out


def _ids_text(run: _Run, ids: Sequence[int]) -> str:
    texts = run._texts(run.tokenizer, list(ids))
    raw = "".join(texts[i] for i in ids).encode("utf-8", "surrogateescape")
    return quote(raw.decode("utf-8", "surrogateescape"), 40)


def _min_new_tokens(run: _Run, minimum: int) -> list[str]:
    out: list[str] = []
    eos = sorted(eos_ids_from(None, dict(run.trace.settings)))
    if not eos:
        raise ValueError("assert_processor_contract: min_new_tokens needs an EOS id; set eos_token_id on the model")
    for b, t in run.steps():
        if t >= minimum:
            continue
        processed = run.processed(b, t)
        open_ = [e for e in eos if e < processed.shape[-1] and float(processed[e]) != -math.inf]
        if open_:
            out.append(
                f"{run.where(b, t, open_[0])}: EOS score {float(processed[open_[0]]):.6g} before min_new_tokens "
                f"{minimum} (must be -inf)"
            )
        chosen = run.trace.prompts[b].steps[t].token_id
        if chosen in eos:
            out.append(f"{run.where(b, t, chosen)}: generated EOS before min_new_tokens {minimum}")
    return out[: _MAX_PER_CONTRACT + 1]


def _temperature(run: _Run, temperature: float) -> list[str]:
    import torch

    out: list[str] = []
    count = 0
    for b, t in run.steps():
        raw, processed = run.raw(b, t), run.processed(b, t)
        expected = raw / temperature
        kept = torch.isfinite(processed)
        bad = [i for i in _mismatches(processed, expected) if bool(kept[i])]
        count += len(bad)
        if bad and len(out) < _MAX_PER_CONTRACT:
            i = bad[0]
            out.append(
                f"{run.where(b, t, i)}: raw logit {float(raw[i]):.6g} -> processed {float(processed[i]):.6g}, "
                f"expected {float(expected[i]):.6g} (raw / {temperature:g})"
            )
    if count > len(out):
        out.append(f"({count} score entries break the rule in all)")
    return out


def assert_processor_contract(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: str | Sequence[str],
    *,
    no_repeat_ngram_size: int | None = None,
    repetition_penalty: float | None = None,
    min_new_tokens: int | None = None,
    temperature: float | None = None,
    max_new_tokens: int = 16,
    top_k: int = 5,
    seed: int = 0,
    **generate_kwargs: Any,
) -> None:
    """Fail when a logits processor breaks its promise. Each contract given runs its own generation:

    - ``no_repeat_ngram_size=n``: no generated n-gram occurs earlier in prompt + output, and every token that would
      complete one has processed score -inf (any mode, beams included: then the output only);
    - ``repetition_penalty=p``: each token already in the sequence (prompt included) has processed score exactly
      raw / p for a positive raw logit and raw * p for a negative one (so with p > 1 it only loses), every other
      token keeps its raw logit;
    - ``min_new_tokens=m``: the EOS scores are -inf and no EOS is generated in the first m steps;
    - ``temperature=T`` (sampling, seeded by `seed`): every score not masked by top-k/top-p is exactly raw / T.
    Score checks are exact: generate() computes these formulas on the same float32 logits. `generate_kwargs` apply
    to every run; score-changing ones (another penalty, a custom `logits_processor`) make the exact formulas fail
    unless that is what you are testing.
    """
    __tracebackhide__ = True
    name = "assert_processor_contract"
    plist = prompt_list(prompts, where=name)
    given = {
        "no_repeat_ngram_size": no_repeat_ngram_size,
        "repetition_penalty": repetition_penalty,
        "min_new_tokens": min_new_tokens,
        "temperature": temperature,
    }
    contracts = {k: v for k, v in given.items() if v is not None}
    if not contracts:
        raise ValueError(f"{name}: pass at least one of {', '.join(given)}")
    for key in ("no_repeat_ngram_size", "min_new_tokens"):
        if contracts.get(key) is not None:
            validation.integer(contracts[key], key, minimum=1, where=name)
    for key in ("repetition_penalty", "temperature"):
        value = contracts.get(key)
        if value is not None and not (isinstance(value, (int, float)) and value > 0):
            raise ValueError(f"{name}: {key} must be a number > 0, got {value!r}")
    if generate_kwargs.get("do_sample") is False and temperature is not None:
        raise ValueError(f"{name}: temperature only applies when sampling; drop do_sample=False")
    beams = decoding(model, tokenizer, generate_kwargs)[0] == "beam"
    if beams and set(contracts) - {"no_repeat_ngram_size"}:
        raise ValueError(f"{name}: with beam search only no_repeat_ngram_size can be checked (scores are per beam)")
    encoder_decoder = bool(getattr(model.config, "is_encoder_decoder", False))
    problems: list[str] = []
    for key, value in contracts.items():
        kw: dict[str, Any] = {**generate_kwargs, key: value}
        if key == "temperature":
            kw["do_sample"] = True
        seed_ = seed if decoding(model, tokenizer, kw)[1] else None
        run = _Run(model, tokenizer, plist, max_new_tokens=max_new_tokens, top_k=top_k, seed=seed_, **kw)
        if key == "no_repeat_ngram_size":
            found = _no_repeat_ngram(run, int(value), encoder_decoder, scores=not beams)
        elif key == "repetition_penalty":
            found = _repetition_penalty(run, float(value))
        elif key == "min_new_tokens":
            found = _min_new_tokens(run, int(value))
        else:
            found = _temperature(run, float(value))
        problems += [f"{key}={value}: {line}" for line in found]
    head = ""
    if problems:
        broken = sorted({p.split(":", 1)[0] for p in problems})
        head = f"{', '.join(broken)} broken (exact check); first: {problems[0]}"
    advice = (
        "generate() applied a processor that does not do what its setting promises: a changed transformers "
        "version, a custom LogitsProcessor in logits_processor=, or a processor subclass replacing the built-in one."
    )
    fail_or_pass(name, problems, head, advice)
