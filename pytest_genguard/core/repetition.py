"""Trace-only invariants: degenerate repetition, and traces that cannot be what `generate()` produced.

Both read nothing but a `GenerationTrace`, so they run on recorded snapshots as well as on fresh traces, and never
import torch. Each raises `AssertionError` with the prompt, the step numbers and the decoded text involved, and
emits an `invariant` event for the terminal summary and the HTML report.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pytest_genguard.core import events
from pytest_genguard.core.explain import quote
from pytest_genguard.core.trace import GenerationTrace, JSONScalar, PromptTrace, Step

__all__ = [
    "LOGPROB_EPSILON",
    "Repetition",
    "assert_no_repetition",
    "assert_well_formed",
    "fail_or_pass",
    "find_repetition",
    "span_text",
]

LOGPROB_EPSILON = 1e-6
"""Slack above 0 allowed for a log-probability (float32 log-softmax rounding); every other well-formedness check is
exact."""

_MIN_DISTINCT_NGRAMS = 10
"""The distinct-n ratio is checked only over at least this many n-grams: over fewer it is noise (with 4 bigrams a
ratio under 0.3 is impossible), and the run and n-gram checks already cover short generations."""

_MAX_SHOWN = 8
"""Problems listed in a failure message; the count of the rest follows."""


def span_text(steps: Sequence[Step], limit: int = 60) -> str:
    """The decoded text of consecutive steps, quoted: their bytes joined first, so a multi-byte character split over
    two tokens reads as one character; bytes that are still incomplete show as ``\\xNN``."""
    raw = b"".join(s.token_bytes for s in steps)
    return quote(raw.decode("utf-8", "surrogateescape"), limit)


def _label(index: int, prompt: PromptTrace) -> str:
    return f"prompt {index} {quote(prompt.prompt, 40)}"


def fail_or_pass(
    name: str, problems: list[str], headline: str, advice: str = "", *, max_shown: int = _MAX_SHOWN
) -> None:
    """Emit the `invariant` event and raise `AssertionError` listing `problems` (pass when there are none).

    The message's first line is `name: headline` (it is what pytest always shows and what the summary counts); the
    problems follow one per line (at most `max_shown`), then `advice`.
    """
    __tracebackhide__ = True
    if not problems:
        events.emit("invariant", name=name, ok=True, failure=False, summary=f"{name}: ok")
        return
    lines = [f"{name}: {headline}"]
    rest = [p for p in problems if p not in headline]  # the headline may quote the first problem already
    lines += [f"  {p}" for p in rest[:max_shown]]
    if len(rest) > max_shown:
        lines.append(f"  ... and {len(rest) - max_shown} more")
    if advice:
        lines.append(advice)
    message = "\n".join(lines)
    events.emit("invariant", name=name, ok=False, failure=True, summary=lines[0])
    raise AssertionError(message)


# ---------------------------------------------------------------------------------------------------- repetition


def _content(prompt: PromptTrace) -> tuple[Step, ...]:
    """The generated steps without a final EOS (which is not text and may well repeat a previous EOS-free run)."""
    if prompt.finish_reason == "eos" and prompt.steps:
        return prompt.steps[:-1]
    return prompt.steps


def _runs(steps: Sequence[Step], max_run: int) -> Iterable[tuple[int, int]]:
    """(start, length) of every run of one token id longer than `max_run`."""
    start = 0
    for i in range(1, len(steps) + 1):
        if i == len(steps) or steps[i].token_id != steps[start].token_id:
            if i - start > max_run:
                yield start, i - start
            start = i


def _repeated_ngrams(steps: Sequence[Step], n: int, max_repeats: int) -> list[tuple[tuple[int, ...], list[int]]]:
    """(n-gram, start steps) of every n-gram of ids that occurs more than `max_repeats` times (overlaps count)."""
    starts: dict[tuple[int, ...], list[int]] = defaultdict(list)
    ids = [s.token_id for s in steps]
    for i in range(len(ids) - n + 1):
        starts[tuple(ids[i : i + n])].append(i)
    found = [(gram, where) for gram, where in starts.items() if len(where) > max_repeats]
    return sorted(found, key=lambda item: item[1][0])


def _check_options(max_run: int, ngram_size: int, max_ngram_repeats: int, min_distinct: float, distinct_n: int) -> None:
    for name, value, low in (("max_run", max_run, 1), ("ngram_size", ngram_size, 1), ("distinct_n", distinct_n, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"assert_no_repetition: {name} must be an integer >= {low}, got {value!r}")
    if isinstance(max_ngram_repeats, bool) or not isinstance(max_ngram_repeats, int) or max_ngram_repeats < 1:
        raise ValueError(f"assert_no_repetition: max_ngram_repeats must be an integer >= 1, got {max_ngram_repeats!r}")
    if not 0.0 <= min_distinct <= 1.0:
        raise ValueError(f"assert_no_repetition: min_distinct must be between 0 and 1, got {min_distinct!r}")


@dataclass(frozen=True)
class Repetition:
    """What the repetition rule found in a trace: one line per problem (prompt, steps, quoted span) and the indexes
    of the prompts that loop. Falsy when nothing loops."""

    problems: tuple[str, ...]
    prompts: tuple[int, ...]
    total_prompts: int

    def __bool__(self) -> bool:
        return bool(self.problems)

    @property
    def headline(self) -> str:
        """One line: how many repetitions in how many prompts, and the first one quoted ("" when none)."""
        if not self.problems:
            return ""
        return (
            f"{_plural(len(self.problems), 'repetition')} in {len(self.prompts)} of "
            f"{_plural(self.total_prompts, 'prompt')}; first: {self.problems[0]}"
        )


def find_repetition(
    trace: GenerationTrace,
    *,
    max_run: int = 4,
    ngram_size: int = 4,
    max_ngram_repeats: int = 3,
    min_distinct: float = 0.3,
    distinct_n: int = 2,
) -> Repetition:
    """The rule of `assert_no_repetition` (same options, same defaults) without failing a test: for callers that
    report a loop their own way (the `GenerationRecorder`'s `on_degenerate` alarm and its logged figures)."""
    _check_options(max_run, ngram_size, max_ngram_repeats, min_distinct, distinct_n)
    problems: list[str] = []
    failing: list[int] = []
    for index, prompt in enumerate(trace.prompts):
        found = _prompt_repetition(index, prompt, max_run, ngram_size, max_ngram_repeats, min_distinct, distinct_n)
        if found:
            failing.append(index)
            problems += found
    return Repetition(tuple(problems), tuple(failing), len(trace.prompts))


def assert_no_repetition(
    trace: GenerationTrace,
    *,
    max_run: int = 4,
    ngram_size: int = 4,
    max_ngram_repeats: int = 3,
    min_distinct: float = 0.3,
    distinct_n: int = 2,
) -> None:
    """Fail when a generation degenerates into a loop: the failure mode of a model that never learned to stop.

    Per prompt, over the generated tokens (a final EOS excluded):
    - no token id repeats more than `max_run` times in a row (default 4);
    - no n-gram of `ngram_size` ids (default 4) occurs more than `max_ngram_repeats` times (default 3);
    - distinct-n, the share of distinct `distinct_n`-grams among all of them (default distinct-2), is at least
      `min_distinct` (default 0.3), checked from 10 n-grams on: a loop of period p over L tokens scores p/(L-1).
    Defaults from the shipped corpus (natural text, tiny tokenizer): no token runs more than twice, no 4-gram occurs
    more than 3 times in any window of 16 to 256 tokens, distinct-2 never falls below 0.65; but a 3-gram occurs 3
    times in 24 tokens ("the word for cat is ... the word for dog is ... the word for"), so a 3-gram limit of 2
    would flag plain text. A loop of period up to 5 fills 24 tokens with a 4-gram 4+ times; longer periods fall
    under distinct-2. tests/hf/test_repetition.py checks the corpus windows and the fine-tuned models' outputs. The
    message quotes the repeated text with its step numbers. `find_repetition` applies the same rule without failing.
    """
    __tracebackhide__ = True
    found = find_repetition(
        trace,
        max_run=max_run,
        ngram_size=ngram_size,
        max_ngram_repeats=max_ngram_repeats,
        min_distinct=min_distinct,
        distinct_n=distinct_n,
    )
    advice = (
        "A model that loops never learned to stop: check that fine-tuning labels keep the EOS token (pad_token = "
        "eos_token with padding masked out of the labels hides it). If this output is intended, loosen max_run=, "
        "ngram_size=, max_ngram_repeats= or min_distinct=."
    )
    fail_or_pass("assert_no_repetition", list(found.problems), found.headline, advice)


def _prompt_repetition(
    index: int,
    prompt: PromptTrace,
    max_run: int,
    ngram_size: int,
    max_ngram_repeats: int,
    min_distinct: float,
    distinct_n: int,
) -> list[str]:
    steps = _content(prompt)
    where = _label(index, prompt)
    out = []
    for start, length in _runs(steps, max_run):
        out.append(
            f"{where}: token {span_text(steps[start : start + 1])} (id {steps[start].token_id}) repeats {length} "
            f"times in a row at steps {start}-{start + length - 1} (max_run {max_run}): "
            f"{span_text(steps[start : start + length])}"
        )
    for gram, starts in _repeated_ngrams(steps, ngram_size, max_ngram_repeats):
        first, last = starts[0], starts[-1] + ngram_size
        if len(set(gram)) == 1 and any(length > max_run for _, length in _runs(steps, max_run)):
            continue  # one token repeated: already reported as a run
        out.append(
            f"{where}: {ngram_size}-gram {span_text(steps[first : first + ngram_size])} occurs {len(starts)} times "
            f"(max_ngram_repeats {max_ngram_repeats}) at steps {', '.join(str(s) for s in starts)}: "
            f"steps {first}-{last - 1} read {span_text(steps[first:last], 80)}"
        )
    total = len(steps) - distinct_n + 1
    if total >= _MIN_DISTINCT_NGRAMS:
        ids = [s.token_id for s in steps]
        distinct = len({tuple(ids[i : i + distinct_n]) for i in range(total)})
        ratio = distinct / total
        if ratio < min_distinct:
            out.append(
                f"{where}: only {distinct} distinct {distinct_n}-grams among {total} (distinct-{distinct_n} "
                f"{ratio:.2f} < min_distinct {min_distinct:g}) in steps 0-{len(steps) - 1}: {span_text(steps, 80)}"
            )
    return out


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


# ---------------------------------------------------------------------------------------------------- well formed


@dataclass(frozen=True)
class _Expect:
    """What the trace's settings say about every prompt."""

    eos: frozenset[int]
    mode: str | None
    max_new_tokens: int | None
    min_new_tokens: int
    ranking_processors: bool
    record_top_k: int | None


def _int_setting(settings: dict[str, JSONScalar], key: str) -> int | None:
    value = settings.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _eos_from(eos_token_id: int | Sequence[int] | None, settings: dict[str, JSONScalar]) -> frozenset[int]:
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
    ranking = (penalty not in (None, 1, 1.0)) or (ngram not in (None, 0)) or bool(custom)
    mode = settings.get("mode")
    return _Expect(
        eos=_eos_from(eos_token_id, settings),
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
    where = _label(index, p)
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
            f"{_plural(len(problems), 'problem')} in {failing} of {_plural(len(trace.prompts), 'prompt')} (exact "
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
