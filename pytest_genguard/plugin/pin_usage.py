"""Pins in the summary: the pins a run wrote (created, or re-trained by ``--genguard-rebuild``, with what moved), and
the pin folders no test used.

Unused pins are listed only after a run of the whole suite: no test paths narrower than the rootdir, no ``-k``,
``-m``, ``--deselect`` or ``--lf``, no module that failed to collect or was skipped whole, and not stopped early. A
test that failed, errored or was skipped may not have reached the ``genguard_finetune`` call that uses a pin, so
``--snapshot-update`` deletes unused pins (as syrupy deletes unused snapshots) only when every test passed; otherwise
the summary says why they were kept.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_genguard.core.text import plural
from pytest_genguard.hf.pins import PIN_MANIFEST
from pytest_genguard.plugin.keep import Ledger
from pytest_genguard.plugin.settings import Settings
from pytest_genguard.plugin.tally import Tally

__all__ = ["UnusedPins", "narrowed", "pin_folders", "unused_lines", "unused_pins", "written_lines"]

_PIN_NAME = re.compile(r"^[A-Za-z0-9_.]+-[0-9a-f]{16}$")  # folder_for(): <arch>-<16 hex digits of the recipe>


@dataclass(frozen=True)
class UnusedPins:
    """Pin folders no test of a whole-suite run used: the ones deleted (``--snapshot-update``) and the ones kept,
    with why they were kept (None: not asked to delete)."""

    folders: tuple[Path, ...]
    deleted: tuple[Path, ...] = ()
    kept_because: str | None = None


def pin_folders(pin_dir: Path) -> list[Path]:
    """The folders in `pin_dir` that genguard wrote as pins (named like a pin, with a manifest)."""
    if not pin_dir.is_dir():
        return []
    return sorted(
        p for p in pin_dir.iterdir() if p.is_dir() and _PIN_NAME.match(p.name) and (p / PIN_MANIFEST).exists()
    )


def narrowed(config: pytest.Config, session: pytest.Session, ledger: Ledger) -> str | None:
    """Why this run did not run the whole suite (None: it did)."""
    option = config.option
    if config.args_source is pytest.Config.ArgsSource.ARGS:
        for arg in config.args:
            if "::" in arg or Path(arg).resolve() != config.rootpath.resolve():
                return f"test paths were given ({arg})"
    elif (
        config.args_source is pytest.Config.ArgsSource.INVOCATION_DIR
        and config.invocation_params.dir.resolve() != config.rootpath.resolve()
    ):
        return "pytest ran in a subfolder of the rootdir"
    for flag, what in (("keyword", "-k"), ("markexpr", "-m"), ("deselect", "--deselect"), ("lf", "--lf")):
        if getattr(option, flag, None):
            return f"{what} was given"
    if ledger.deselected:
        return "tests were deselected"
    if ledger.broken or ledger.skipped:
        return "a test module failed to collect or was skipped"
    if session.shouldfail or session.shouldstop:
        return "the run stopped early"
    return None


def unused_pins(
    config: pytest.Config, session: pytest.Session, current: Settings, tally: Tally, ledger: Ledger
) -> UnusedPins | None:
    """The pin folders no test used (None when this run cannot tell: see `narrowed`); deleted with
    ``--snapshot-update`` when every test passed."""
    if narrowed(config, session, ledger) is not None:
        return None
    used = {Path(folder).resolve() for folder in tally.pins_used}
    unused = tuple(p for p in pin_folders(current.pin_dir) if p.resolve() not in used)
    if not unused or not current.snapshot_update:
        return UnusedPins(unused) if unused else None
    unfinished = sum(1 for outcome in ledger.outcomes.values() if outcome != "passed")
    if unfinished:
        because = f"{plural(unfinished, 'test')} did not pass (failed, errored or skipped) and may use them"
        return UnusedPins(unused, kept_because=because)
    for folder in unused:
        shutil.rmtree(folder)
    return UnusedPins(unused, deleted=unused)


def _shown(path: Path, rootdir: Path) -> str:
    try:
        return str(path.relative_to(rootdir))
    except ValueError:
        return str(path)


def unused_lines(unused: UnusedPins | None, rootdir: Path) -> list[str]:
    """The summary's lines about unused pins."""
    if unused is None:
        return []
    names = [f"  {_shown(p, rootdir)}" for p in unused.folders]
    if unused.deleted:
        return [f"deleted {plural(len(unused.deleted), 'pin folder')} no test used (--snapshot-update):", *names]
    lines = [f"{plural(len(unused.folders), 'pin folder')} no test used in this run of the whole suite:", *names]
    if unused.kept_because is not None:
        lines.append(f"kept: {unused.kept_because}; delete them when every test passes, or by hand (git rm -r)")
    else:
        lines.append("delete them with: pytest --snapshot-update (or by hand: git rm -r)")
    return lines


def written_lines(tally: Tally, rootdir: Path) -> list[str]:
    """The pins this run wrote: new ones, and re-pinned ones with what moved."""
    lines: list[str] = []
    repinned = [(nodeid, e) for nodeid, e in tally.pins_written if e.action == "re-pinned"]
    created = [(nodeid, e) for nodeid, e in tally.pins_written if e.action == "created"]
    if repinned:
        lines.append("re-pinned weights (review and commit the folders; snapshots were recorded against the old ones):")
        for nodeid, event in repinned:
            lines.append(f"  {_shown(Path(event.folder), rootdir)} ({nodeid})")
            lines += [f"    {change}" for change in event.changes]
    if created:
        lines.append("new pins (commit the folders with the snapshots):")
        lines += [f"  {_shown(Path(event.folder), rootdir)} ({nodeid})" for nodeid, event in created]
    return lines
