"""The trace-only repetition invariant: `assert_no_repetition` (its rule as `find_repetition`).

It reads nothing but a `GenerationTrace`, so it runs on recorded snapshots as well as on fresh traces (and in the
recorder's alarm), and never imports torch. It raises `AssertionError` with the prompt, the step numbers and the
decoded text involved, and emits an `invariant` event for the terminal summary and the HTML report.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TypedDict, Unpack

from pytest_genguard.core.checks import fail_or_pass, prompt_label, span_text
from pytest_genguard.core.text import plural
from pytest_genguard.core.trace import GenerationTrace, PromptTrace, Step

__all__ = ["Repetition", "RepetitionOptions", "RepetitionRule", "assert_no_repetition", "find_repetition"]

_MIN_DISTINCT_NGRAMS = 10
"""The distinct-n ratio is checked only over at least this many n-grams: over fewer it is noise (with 4 bigrams a
ratio under 0.3 is impossible), and the run and n-gram checks already cover short generations."""

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


class RepetitionOptions(TypedDict, total=False):
    """The options of `assert_no_repetition` and `find_repetition` (their defaults: `RepetitionRule`)."""

    max_run: int
    ngram_size: int
    max_ngram_repeats: int
    min_distinct: float
    distinct_n: int


@dataclass(frozen=True)
class RepetitionRule:
    """The repetition rule's limits, checked once (see `assert_no_repetition` for what each one means)."""

    max_run: int = 4
    ngram_size: int = 4
    max_ngram_repeats: int = 3
    min_distinct: float = 0.3
    distinct_n: int = 2

    def __post_init__(self) -> None:
        for name in ("max_run", "ngram_size", "max_ngram_repeats", "distinct_n"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"assert_no_repetition: {name} must be an integer >= 1, got {value!r}")
        if not 0.0 <= self.min_distinct <= 1.0:
            raise ValueError(f"assert_no_repetition: min_distinct must be between 0 and 1, got {self.min_distinct!r}")


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
            f"{plural(len(self.problems), 'repetition')} in {len(self.prompts)} of "
            f"{plural(self.total_prompts, 'prompt')}; first: {self.problems[0]}"
        )


def find_repetition(trace: GenerationTrace, **options: Unpack[RepetitionOptions]) -> Repetition:
    """The rule of `assert_no_repetition` (same options, same defaults) without failing a test: for callers that
    report a loop their own way (the `GenerationRecorder`'s `on_degenerate` alarm and its logged figures)."""
    rule = RepetitionRule(**options)
    problems: list[str] = []
    failing: list[int] = []
    for index, prompt in enumerate(trace.prompts):
        found = _prompt_repetition(index, prompt, rule)
        if found:
            failing.append(index)
            problems += found
    return Repetition(tuple(problems), tuple(failing), len(trace.prompts))


def assert_no_repetition(trace: GenerationTrace, **options: Unpack[RepetitionOptions]) -> None:
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
    found = find_repetition(trace, **options)
    advice = (
        "A model that loops never learned to stop: check that fine-tuning labels keep the EOS token (pad_token = "
        "eos_token with padding masked out of the labels hides it). If this output is intended, loosen max_run=, "
        "ngram_size=, max_ngram_repeats= or min_distinct=."
    )
    fail_or_pass("assert_no_repetition", list(found.problems), found.headline, advice)


def _prompt_repetition(index: int, prompt: PromptTrace, rule: RepetitionRule) -> list[str]:
    max_run, ngram_size, max_ngram_repeats = rule.max_run, rule.ngram_size, rule.max_ngram_repeats
    min_distinct, distinct_n = rule.min_distinct, rule.distinct_n
    steps = _content(prompt)
    where = prompt_label(index, prompt)
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
