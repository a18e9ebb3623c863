"""Two reviews of snapshot data: before it is stored or compared, and after a snapshot was re-recorded.

- NaN or inf in a trace is a numerical fault, not a behaviour to freeze: the comparison rule treats NaN as equal to
  NaN, so a broken model would pass against its own broken snapshot as "identical". `nonfinite_values` finds them
  (per prompt and step), `nonfinite_message` says what to do; ``@pytest.mark.genguard(allow_nonfinite=True)`` opts in.
- Re-recording (``--genguard-update-stale``, ``--snapshot-update``, ``genguard review --accept``) is allowed but never
  silent: `accepted_changes` says what the new snapshot changed compared with the old one, and `changed_lines` lays it
  out the same way for the terminal summary and for `genguard review`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from pytest_genguard.core.change import path_split
from pytest_genguard.core.comparison import describe
from pytest_genguard.core.documents import Outcome, history_of
from pytest_genguard.core.text import quote
from pytest_genguard.core.text_diff import prompt_difference
from pytest_genguard.core.trace import GenerationTrace, PromptTrace
from pytest_genguard.core.verdict import Divergence

__all__ = ["accepted_changes", "changed_lines", "nonfinite_message", "nonfinite_values"]

_NONFINITE_SHOWN = 10


def _step_nonfinite(step: Any) -> list[str]:
    values = [("logprob", step.logprob), ("score", step.score)]
    if step.best_score is not None:
        values.append(("best_score", step.best_score))
    values += [(f"top_logprobs[{rank}]", v) for rank, v in enumerate(step.top_logprobs)]
    return [f"{name} {value}" for name, value in values if not math.isfinite(value)]


def nonfinite_values(value: Any) -> tuple[int, list[str]]:
    """How many NaN/inf values a trace (or a recorder history: each checkpoint's trace and loss) holds, and where:
    one entry per step, ``prompt 0 'the quick' step 3: logprob nan, score nan``."""
    if isinstance(value, GenerationTrace):
        count, where = 0, []
        for i, prompt in enumerate(value.prompts):
            for n, step in enumerate(prompt.steps):
                bad = _step_nonfinite(step)
                if bad:
                    count += len(bad)
                    where.append(f"prompt {i} {quote(prompt.prompt, 30)} step {n}: {', '.join(bad)}")
        return count, where
    checkpoints = history_of(value)
    if checkpoints is not None:
        count, where = 0, []
        for k, checkpoint in enumerate(checkpoints):
            prefix = f"checkpoint {k} (step {checkpoint.step})"
            if checkpoint.loss is not None and not math.isfinite(checkpoint.loss):
                count += 1
                where.append(f"{prefix}: loss {checkpoint.loss}")
            n, inner = nonfinite_values(checkpoint.trace)
            count += n
            where += [f"{prefix} {entry}" for entry in inner]
        return count, where
    return 0, []


def nonfinite_message(
    name: str,
    source: str,
    count: int,
    where: list[str],
    *,
    received: str = "the trace",
    outcome: str = "it was neither recorded nor compared",
) -> list[str]:
    """The failure text for non-finite values without the opt-in: what, where, why it matters, what to do."""
    lines = [
        f"genguard snapshot {name!r} ({source}): {received} holds {_count(count)} (NaN or inf), first at "
        f"{where[0]}; {outcome}",
        "NaN or inf logprobs mean a numerical fault (an overflow in float16, a fully masked row, a bad weight): fix "
        "the model, or, if they are expected, mark the test @pytest.mark.genguard(allow_nonfinite=True)",
        "non-finite values at:",
        *(f"  {entry}" for entry in where[:_NONFINITE_SHOWN]),
    ]
    if len(where) > _NONFINITE_SHOWN:
        lines.append(f"  ... and {len(where) - _NONFINITE_SHOWN} more steps")
    return lines


def _count(n: int) -> str:
    return f"{n} non-finite value{'' if n == 1 else 's'}"


def accepted_changes(outcome: Outcome) -> list[str]:
    """What re-recording a snapshot accepted, per prompt: the first divergence and changed finish reasons (for the
    summary of --genguard-update-stale and --snapshot-update, so a reviewer sees it)."""
    cmp = outcome.comparison
    if cmp is None:
        return [outcome.summary]
    lines = [f"why stale: {'; '.join(cmp.stale_reasons)}"] if cmp.stale_reasons else []
    old, new = cmp.expected.prompts, cmp.actual.prompts
    divergences = {d.prompt_index: d for d in cmp.divergences}
    unchanged = 0
    for i in range(max(len(old), len(new))):
        if i >= len(old) or i >= len(new):
            prompt = (new if i >= len(old) else old)[i].prompt
            lines.append(f"prompt {i} {quote(prompt, 30)} {'added' if i >= len(old) else 'removed'}")
            continue
        if old[i].prompt != new[i].prompt:
            lines.append(f"prompt {i} replaced: {prompt_difference(old[i], new[i])} (not compared)")
            continue
        div = divergences.get(i)
        changed = [describe(cmp, div) + _later_split(old[i], new[i], div)] if div is not None else []
        if old[i].finish_reason != new[i].finish_reason and (
            div is None or div.kind not in ("length", "finish_reason")
        ):
            where = f"prompt {i} {quote(old[i].prompt, 30)}"
            changed.append(f"{where} finish {old[i].finish_reason!r} -> {new[i].finish_reason!r}")
        lines += changed
        unchanged += not changed
    if unchanged:
        lines.append(f"{unchanged} prompt{'' if unchanged == 1 else 's'} unchanged (same tokens and finish reasons)")
    return lines


def changed_lines(who: str, was: str | None, changes: Sequence[str]) -> list[str]:
    """A re-recorded snapshot as the summary lists it: ``<who> (was stale)``, then what it changed, indented."""
    return [f"{who} ({f'was {was}' if was else 're-recorded'})", *(f"  {change}" for change in changes)]


def _later_split(old: PromptTrace, new: PromptTrace, div: Divergence) -> str:
    """``; its path splits at step 7: ' Paris' -> ' the'`` when a value drifted first (the rule stops there)."""
    if div.kind == "token":
        return ""
    step = path_split(old, new)
    if step is None:
        return ""
    return f"; its path splits at step {step}: {quote(old.steps[step].token, 16)} -> {quote(new.steps[step].token, 16)}"
