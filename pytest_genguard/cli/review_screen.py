"""`genguard review` on a terminal: one pending trace at a time, with its verdict, what accepting it changes, how many
prompts changed path, and the first divergence with both paths around it (token, margin, top-k), in a view a key
switches (side by side, old, new); ``a`` accepts, ``r`` rejects, ``s`` skips, ``q`` quits. Keys are read one at a
time from the terminal (cbreak mode, restored after each key).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from pytest_genguard.cli.inputs import EXIT_FAILED, EXIT_OK, console
from pytest_genguard.cli.review import accept, reject
from pytest_genguard.core.change import Change
from pytest_genguard.core.comparison import headline, window
from pytest_genguard.core.documents import compare_documents
from pytest_genguard.core.pending import Broken, Pending, PendingStore
from pytest_genguard.core.text import plural
from pytest_genguard.core.tolerances import Overrides

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["KEYS", "VIEWS", "interactive", "read_key", "screen"]

VIEWS = ("side by side", "old", "new")
KEYS = "[a] accept  [r] reject  [s] skip  [v] view: {view} (side by side, old, new)  [q] quit"
_RADIUS = 3


def read_key() -> str:
    """One key from the terminal on standard input, without waiting for Enter ("" at end of input)."""
    fd = sys.stdin.fileno()
    try:
        import termios
        import tty
    except ImportError:  # Windows
        import msvcrt

        return str(msvcrt.getwch())  # type: ignore[attr-defined,unused-ignore]  # Windows only
    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        data = os.read(fd, 1)
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
    return data.decode("utf-8", "replace")


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
    return [*lines, *(("", line) for line in shown)]


def _show(out: Console, lines: list[tuple[str, str]]) -> None:
    out.rule()
    for style, text in lines:
        out.print(text, style=style or None, markup=False, highlight=False)


def interactive(store: PendingStore, *, key: Callable[[], str] = read_key, out: Console | None = None) -> int:
    """Review every pending trace on the terminal; the exit code (1 when an accept was refused)."""
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
