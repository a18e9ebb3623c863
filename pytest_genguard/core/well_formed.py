"""The trace-only well-formedness invariant: `assert_well_formed`, traces that cannot be what `generate()` produced.

It reads nothing but a `GenerationTrace` (and the EOS ids its settings hold), so it runs on recorded snapshots as well
as on fresh traces, and never imports torch. It raises `AssertionError` naming the prompt, the step and the value, and
emits an `invariant` event.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_genguard.core.checks import fail_or_pass, prompt_label, span_text
from pytest_genguard.core.jsontext import JSONScalar
from pytest_genguard.core.text import plural
from pytest_genguard.core.trace import GenerationTrace, PromptTrace, Step

__all__ = ["LOGPROB_EPSILON", "assert_well_formed", "eos_ids_from"]

LOGPROB_EPSILON = 1e-6
"""Slack above 0 allowed for a log-probability (float32 log-softmax rounding); every other well-formedness check is
exact."""


@dataclass(frozen=True)
class _Expect:
    """What the trace's settings say about every prompt."""

    eos: frozenset[int]
    mode: str | None
    max_new_tokens: int | None
    min_new_tokens: int
    ranking_processors: bool
    record_top_k: int | None


# Settings that never re-rank a greedy step's tokens (min_new_tokens is checked on its own). Any other setting a
# trace stores (bad_words_ids, suppress_tokens, sequence_bias, ...: record() stores every one that was set) may.
_NOT_RANKING = frozenset(
    {
        "max_new_tokens",
        "min_new_tokens",
        "do_sample",
        "num_beams",
        "temperature",
        "top_k",
        "top_p",
        "typical_p",
        "min_p",
        "length_penalty",
        "early_stopping",
        "use_cache",
        "mode",
        "seed",
        "record_top_k",
        "eos_token_id",
        "repetition_penalty",
        "no_repeat_ngram_size",
        "logits_processor",
    }
)


def _int_setting(settings: dict[str, JSONScalar], key: str) -> int | None:
    value = settings.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def eos_ids_from(eos_token_id: int | Sequence[int] | None, settings: dict[str, JSONScalar]) -> frozenset[int]:
    """The EOS ids to hold a trace to: `eos_token_id` when given, else the ids its settings recorded."""
    if eos_token_id is not None:
        return frozenset([eos_token_id] if isinstance(eos_token_id, int) else eos_token_id)
    value = settings.get("eos_token_id")
    if isinstance(value, int) and not isinstance(value, bool):
        return frozenset([value])
    if isinstance(value, str) and value:
        try:
            return frozenset(int(v) for v in value.split(","))
        except ValueError:
            return frozenset()
    return frozenset()


def _expectations(trace: GenerationTrace, eos_token_id: int | Sequence[int] | None) -> _Expect:
    settings = dict(trace.settings)
    penalty = settings.get("repetition_penalty")
    ngram = settings.get("no_repeat_ngram_size")
    custom = settings.get("logits_processor")  # record(logits_processor=...): class names of the user's processors
    other = any(key not in _NOT_RANKING and value is not None for key, value in settings.items())
    ranking = (penalty not in (None, 1, 1.0)) or (ngram not in (None, 0)) or bool(custom) or other
    mode = settings.get("mode")
    return _Expect(
        eos=eos_ids_from(eos_token_id, settings),
        mode=mode if isinstance(mode, str) else None,
        max_new_tokens=_int_setting(settings, "max_new_tokens"),
        min_new_tokens=_int_setting(settings, "min_new_tokens") or 0,
        ranking_processors=ranking,
        record_top_k=_int_setting(settings, "record_top_k"),
    )


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def _step_problems(t: int, s: Step, ex: _Expect, check_raw_argmax: bool) -> list[str]:
    """Exact per-step checks (see `assert_well_formed`)."""
    out = []
    token = f"step {t} {span_text([s], 20)} (id {s.token_id})"
    if len(s.top_ids) != len(s.top_logprobs):
        out.append(f"{token}: top_ids has {len(s.top_ids)} entries but top_logprobs {len(s.top_logprobs)}")
    if not s.top_ids:
        out.append(f"{token}: empty top-k")
    if len(set(s.top_ids)) != len(s.top_ids):
        out.append(f"{token}: top_ids repeat an id: {list(s.top_ids)}")
    if ex.record_top_k is not None and len(s.top_ids) > ex.record_top_k:
        out.append(f"{token}: {len(s.top_ids)} top-k entries but record_top_k is {ex.record_top_k}")
    bad = [f"{v!r}" for v in s.top_logprobs if not math.isfinite(v) or v > LOGPROB_EPSILON]
    if bad:
        out.append(f"{token}: top_logprobs must be finite and <= 0, found {', '.join(bad)}")
    unsorted = [i for i in range(len(s.top_logprobs) - 1) if s.top_logprobs[i] < s.top_logprobs[i + 1]]
    if unsorted:
        i = unsorted[0]
        out.append(
            f"{token}: top-k not sorted best first: rank {i} {s.top_logprobs[i]!r} < rank {i + 1} "
            f"{s.top_logprobs[i + 1]!r}"
        )
    if not math.isfinite(s.logprob) or s.logprob > LOGPROB_EPSILON:
        out.append(f"{token}: chosen raw logprob {s.logprob!r} is not a finite value <= 0")
    if not math.isfinite(s.score):
        out.append(f"{token}: processed score {s.score!r} is not finite (decoding chose a token it had ruled out)")
    if s.best_score is not None and not math.isfinite(s.best_score):
        out.append(f"{token}: best processed score {s.best_score!r} is not finite")
    rank = s.rank_of(s.token_id)
    if rank is not None and rank < len(s.top_logprobs) and s.top_logprobs[rank] != s.logprob:
        out.append(
            f"{token}: its logprob {s.logprob!r} differs from its own top-k entry {s.top_logprobs[rank]!r} "
            "(both come from the same log-softmax)"
        )
    if rank is None and s.top_logprobs and s.logprob > s.top_logprobs[-1]:
        out.append(
            f"{token}: not in the top-{len(s.top_ids)} although its logprob {s.logprob!r} beats the k-th "
            f"{s.top_logprobs[-1]!r}"
        )
    if ex.mode == "greedy":
        if s.best_score is not None and _finite(s.best_score) and s.score != s.best_score:
            out.append(
                f"{token}: greedy chose a token whose processed score {s.score!r} is below the step's best "
                f"{s.best_score!r} (something sampled or re-ranked after the processors)"
            )
        forced = t < ex.min_new_tokens
        if check_raw_argmax and not ex.ranking_processors and not forced and s.top_ids and rank != 0:
            tie = s.top_logprobs and s.logprob == s.top_logprobs[0]
            if not tie:
                top = s.top_logprobs[0] if s.top_logprobs else math.nan
                out.append(
                    f"{token}: greedy without ranking processors must choose the raw argmax, but chose rank "
                    f"{rank if rank is not None else f'>{len(s.top_ids) - 1}'} (logprob {s.logprob!r} vs best "
                    f"{top!r}, id {s.top_ids[0]})"
                )
    return out


def _prompt_problems(index: int, p: PromptTrace, ex: _Expect, check_raw_argmax: bool) -> list[str]:
    where = prompt_label(index, p)
    out = [
        f"{where} {problem}" for t, s in enumerate(p.steps) for problem in _step_problems(t, s, ex, check_raw_argmax)
    ]
    n = len(p.steps)
    if n == 0:
        return [*out, f"{where}: empty generation (no steps; an immediate EOS is still one step)"]
    if ex.eos:
        early = [t for t, s in enumerate(p.steps[:-1]) if s.token_id in ex.eos]
        if early:
            out.append(
                f"{where}: EOS (id {p.steps[early[0]].token_id}) at step {early[0]} is followed by "
                f"{n - 1 - early[0]} more tokens: {span_text(p.steps[early[0] + 1 :])}"
            )
        ends_with_eos = p.steps[-1].token_id in ex.eos
        if (p.finish_reason == "eos") != ends_with_eos:
            last = f"last token {span_text(p.steps[-1:])} (id {p.steps[-1].token_id})"
            ids = sorted(ex.eos)
            out.append(
                f"{where}: finish_reason {p.finish_reason!r} but the {last} "
                f"{'is' if ends_with_eos else 'is not'} EOS {ids}"
            )
    if ex.max_new_tokens is not None:
        if n > ex.max_new_tokens:
            out.append(f"{where}: {n} steps but max_new_tokens is {ex.max_new_tokens}")
        if p.finish_reason == "length" and n != ex.max_new_tokens:
            out.append(f"{where}: finish_reason 'length' after {n} steps, not max_new_tokens {ex.max_new_tokens}")
        if p.finish_reason == "stop" and n >= ex.max_new_tokens:
            out.append(f"{where}: finish_reason 'stop' but it ran the full max_new_tokens {ex.max_new_tokens}")
    if ex.min_new_tokens and p.finish_reason == "eos" and n - 1 < ex.min_new_tokens:
        out.append(
            f"{where}: EOS at step {n - 1}, before min_new_tokens {ex.min_new_tokens} tokens were generated "
            "(the min-new-tokens processor did not suppress it)"
        )
    return out


def assert_well_formed(
    trace: GenerationTrace,
    *,
    eos_token_id: int | Sequence[int] | None = None,
    check_raw_argmax: bool = True,
) -> None:
    """Fail when a trace could not have come from a correct `generate()`: broken scores, sampling where greedy was
    asked for, tokens after EOS, lengths outside the settings.

    Every check is exact (no tolerance) except one: log-probabilities may exceed 0 by `LOGPROB_EPSILON`. Per step:
    top-k ids distinct, logprobs finite, <= 0 and sorted best first; the chosen token's logprob finite, equal to its
    own top-k entry and, outside the top-k, not above the k-th; processed scores finite. Greedy (settings "mode"):
    the chosen score equals the step's best processed score (skipped for hand-made steps without `best_score`);
    and, where no processor changes the ranking (no repetition_penalty, no no_repeat_ngram_size, past the
    min_new_tokens steps), the chosen token is the raw argmax (an exact tie is accepted). Custom processors given to
    `record(logits_processor=...)` are recorded (settings "logits_processor", their class names): the chosen token is
    then held to the processed scores only. Pass `check_raw_argmax=False` when processors the trace's settings do not
    record re-rank tokens (`bad_words_ids`, `suppress_tokens`, `sequence_bias`, `forced_eos_token_id`). Per prompt:
    at least one step; EOS only as the last step and finish_reason "eos" exactly when the last token is EOS; at most
    max_new_tokens steps, exactly that many for "length"; no EOS before min_new_tokens. EOS ids come from
    `eos_token_id`, else from the trace's settings ("eos_token_id", stored by `record()`); without either the EOS
    checks are skipped.
    """
    __tracebackhide__ = True
    ex = _expectations(trace, eos_token_id)
    problems: list[str] = []
    failing = 0
    for index, prompt in enumerate(trace.prompts):
        found = _prompt_problems(index, prompt, ex, check_raw_argmax)
        failing += bool(found)
        problems += found
    headline = ""
    if problems:
        headline = (
            f"{plural(len(problems), 'problem')} in {failing} of {plural(len(trace.prompts), 'prompt')} (exact "
            f"checks); first: {problems[0]}"
        )
    advice = ""
    if any("must choose the raw argmax" in p for p in problems):
        advice = (
            "A greedy path that leaves the raw argmax was re-ranked by a processor the trace's settings do not "
            "record (bad_words_ids, suppress_tokens, sequence_bias, one in the model's generation config): pass "
            "check_raw_argmax=False for such traces (processors given to record(logits_processor=...) are recorded)."
        )
    fail_or_pass("assert_well_formed", problems, headline, advice)
