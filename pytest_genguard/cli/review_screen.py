"""`genguard review` on a terminal: one pending trace at a time, with its verdict, what accepting it changes, how many
prompts changed path, and the first divergence with both paths around it (token, margin, top-k), in a view a key
switches (side by side, old, new); ``a`` accepts, ``r`` rejects, ``s`` skips, ``q`` quits. Keys are read one at a
time from the terminal (cbreak mode for the whole review, restored at its end).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from collections.abc import Callable, Iterator
from typing import IO, TYPE_CHECKING

from pytest_genguard.cli.inputs import EXIT_FAILED, EXIT_OK, console
from pytest_genguard.core.change import Change, path_split
from pytest_genguard.core.comparison import Comparison, headline, window
from pytest_genguard.core.documents import compare_documents
from pytest_genguard.core.pending import Broken, Pending, PendingStore
from pytest_genguard.core.text import plural
from pytest_genguard.core.tolerances import Overrides
from pytest_genguard.core.verdict import Divergence

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["KEYS", "VIEWS", "interactive", "screen", "terminal_keys"]

VIEWS = ("side by side", "old", "new")
KEYS = "[a] accept  [r] reject  [s] skip  [v] view: {view} (side by side, old, new)  [q] quit"
_RADIUS = 3


@contextlib.contextmanager
def terminal_keys() -> Iterator[Callable[[], str]]:
    """One key at a time from the terminal on standard input, without Enter or echo ("" at end of input): cbreak
    mode for the whole review (keys typed ahead are kept), the terminal's settings restored at the end."""
    fd = sys.stdin.fileno()
    try:
        import termios
        import tty
    except ImportError:  # Windows: the console reads single keys as it is
        import msvcrt

        yield lambda: str(msvcrt.getwch())  # type: ignore[attr-defined,unused-ignore]
        return
    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd, termios.TCSANOW)  # not TCSAFLUSH: that would drop keys typed ahead
    try:
        yield lambda: os.read(fd, 1).decode("utf-8", "replace")
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _sides(view: str) -> tuple[bool, bool]:
    return {"old": (True, False), "new": (False, True)}.get(view, (True, True))


def screen(store: PendingStore, entry: Pending, position: str, view: str) -> list[tuple[str, str]]:
    """The lines shown for `entry` as (style, text): the test, the verdict, what accepting changes, how many prompts
    changed path, the first divergence in `view`; or why it cannot be accepted."""
    change = Change.from_json(entry.change) if entry.change else None
    why = change.why if change is not None and change.why else entry.summary.removeprefix(f"{entry.verdict}: ")
    lines = [
        ("bold", f"{position} {entry.test}  (snapshot {entry.name}, {entry.file})"),
        ("bold red" if entry.verdict == "regression" else "bold yellow", f"{entry.verdict}: {why}"),
    ]
    if change is not None:
        path, drift, ties = change.counts()
        lines.append(
            (
                "",
                f"prompts changed: {path} of {change.prompts} changed path, {drift} drifted in value, "
                f"{plural(ties, 'near tie')}" + (f"; {change.kld.text()}" if change.kld else ""),
            )
        )
    lines += [("dim", "accepting writes what changed:"), *(("", f"  {c}") for c in entry.changes)]
    refused = store.refusal(entry)
    if refused is not None:
        return [*lines, *(("bold red", f"cannot be accepted: {line}") for line in refused)]
    text, stored = store.text(entry), store.stored_text(entry)
    if text is None or stored is None:
        return lines
    outcome = compare_documents(text, stored, overrides=Overrides.of(entry.overrides), source=entry.compared)
    cmp = outcome.comparison
    div = headline(cmp) if cmp is not None else None
    if cmp is None or div is None:
        return [*lines, ("dim", "the paths do not diverge (the snapshot is stale for another reason)")]
    lines.append(("bold", f"view: {view} (old: the snapshot, new: the pending trace)"))
    shown = window(cmp, div, radius=_RADIUS, names=("old", "new"), show=_sides(view))
    lines += [("", line) for line in shown]
    split = _later_split(cmp, div)
    if split is not None:  # a value drifted first: the tokens split later, where a reviewer looks
        lines.append(("bold", f"the path splits at step {split.step} of prompt {split.prompt_index}:"))
        lines += [("", line) for line in window(cmp, split, radius=1, names=("old", "new"), show=_sides(view))[1:]]
    return lines


def _later_split(cmp: Comparison, shown: Divergence) -> Divergence | None:
    """The first prompt's token split that the window around `shown` does not show, as a divergence to draw."""
    for div in cmp.divergences:
        if div.prompt_index >= min(len(cmp.expected.prompts), len(cmp.actual.prompts)):
            continue
        old, new = cmp.expected.prompts[div.prompt_index], cmp.actual.prompts[div.prompt_index]
        step = path_split(old, new)
        if step is None or (div.prompt_index == shown.prompt_index and abs(step - shown.step) <= _RADIUS):
            continue
        o, n = old.steps[step], new.steps[step]
        return dataclasses.replace(
            div, step=step, kind="token", expected_token_id=o.token_id, actual_token_id=n.token_id
        )
    return None


def _show(out: Console, lines: list[tuple[str, str]]) -> None:
    out.rule()
    for style, text in lines:
        out.print(text, style=style or None, markup=False, highlight=False)


Accept = Callable[[PendingStore, "Pending | Broken", IO[str], IO[str]], bool]
Reject = Callable[[PendingStore, "Pending | Broken", IO[str]], None]


def interactive(
    store: PendingStore,
    accept: Accept,
    reject: Reject,
    *,
    key: Callable[[], str] | None = None,
    out: Console | None = None,
) -> int:
    """Review every pending trace on the terminal with `accept` and `reject` (`review`'s, which print what they did);
    `key`: the keys (else the terminal's); the exit code (1 when an accept was refused)."""
    if key is None:
        with terminal_keys() as read:
            return interactive(store, accept, reject, key=read, out=out)
    screen_out = out if out is not None else console()
    entries = store.entries()
    if not entries:
        screen_out.print(f"no pending traces in {store.folder}", markup=False)
        return EXIT_OK
    done = {"accepted": 0, "rejected": 0, "skipped": 0}
    refused = 0
    for n, entry in enumerate(entries, 1):
        view = VIEWS[0]
        while True:
            position = f"[{n}/{len(entries)}]"
            if isinstance(entry, Broken):
                _show(screen_out, [("bold red", f"{position} {entry.id}: cannot be accepted: {entry.why}")])
            else:
                _show(screen_out, screen(store, entry, position, view))
            screen_out.print(KEYS.format(view=view), style="bold cyan", markup=False)
            pressed = key().lower()
            if pressed in ("q", ""):
                return _end(screen_out, done, len(entries) - n + 1, refused)
            if pressed == "v":
                view = VIEWS[(VIEWS.index(view) + 1) % len(VIEWS)]
                continue
            if pressed in ("a", "r", "s"):
                break
        if pressed == "a":
            ok = accept(store, entry, screen_out.file, screen_out.file)
            done["accepted" if ok else "skipped"] += 1
            refused += not ok
        elif pressed == "r":
            reject(store, entry, screen_out.file)
            done["rejected"] += 1
        else:
            done["skipped"] += 1
    return _end(screen_out, done, 0, refused)


def _end(out: Console, done: dict[str, int], left: int, refused: int) -> int:
    counts = ", ".join(f"{name} {n}" for name, n in done.items())
    skipped = done["skipped"] + left
    out.print(f"{counts}; {plural(skipped, 'trace')} still pending (genguard review --list)", markup=False)
    return EXIT_FAILED if refused else EXIT_OK
