"""How invariants report: `fail_or_pass` emits the `invariant` event and raises the `AssertionError` that lists
the problems; `span_text` and `prompt_label` quote what a message points at. Used by the trace-only checks here and by
the model invariants of `pytest_genguard.hf`. Standard library only.
"""

from __future__ import annotations

from collections.abc import Sequence

from pytest_genguard.core import events
from pytest_genguard.core.text import quote
from pytest_genguard.core.trace import PromptTrace, Step

__all__ = ["MAX_SHOWN", "fail_or_pass", "prompt_label", "span_text"]

MAX_SHOWN = 8
"""Problems listed in a failure message; the count of the rest follows."""


def span_text(steps: Sequence[Step], limit: int = 60) -> str:
    """The decoded text of consecutive steps, quoted: their bytes joined first, so a multi-byte character split over
    two tokens reads as one character; bytes that are still incomplete show as ``\\xNN``."""
    raw = b"".join(s.token_bytes for s in steps)
    return quote(raw.decode("utf-8", "surrogateescape"), limit)


def prompt_label(index: int, prompt: PromptTrace) -> str:
    """``prompt 0 'the quick'``: how messages name a prompt."""
    return f"prompt {index} {quote(prompt.prompt, 40)}"


def fail_or_pass(
    name: str, problems: list[str], headline: str, advice: str = "", *, max_shown: int = MAX_SHOWN
) -> None:
    """Emit the `invariant` event and raise `AssertionError` listing `problems` (pass when there are none).

    The message's first line is `name: headline` (it is what pytest always shows and what the summary counts); the
    problems follow one per line (at most `max_shown`), then `advice`.
    """
    __tracebackhide__ = True
    if not problems:
        events.emit(events.InvariantEvent(name, ok=True, summary=f"{name}: ok"))
        return
    lines = [f"{name}: {headline}"]
    rest = [p for p in problems if p not in headline]  # the headline may quote the first problem already
    lines += [f"  {p}" for p in rest[:max_shown]]
    if len(rest) > max_shown:
        lines.append(f"  ... and {len(rest) - max_shown} more")
    if advice:
        lines.append(advice)
    message = "\n".join(lines)
    events.emit(events.InvariantEvent(name, ok=False, summary=lines[0]))
    raise AssertionError(message)
