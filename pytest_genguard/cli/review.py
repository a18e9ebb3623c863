"""`genguard review`: the new traces a test run kept for review (`pytest_genguard.core.pending`), accepted or
rejected one at a time on a terminal (`review_screen`), or by flags: ``--list``, ``--accept ID...``,
``--reject ID...``, ``--accept-all``, ``--reject-all``. An ID is a pending trace's id, a test's node id (all of its
snapshots) or a snapshot file.

Accepting writes the snapshot from the pending trace exactly as ``--snapshot-update`` would have (the same text, the
same write, `core.files.write_snapshot`) without running the model, and refuses, saying why, when the snapshot
changed since the run compared with it. Exit codes: 0 done (or nothing pending), 1 an accept was refused, 2 bad input
(an unknown ID, flags that do not go together, no terminal and no flag).
"""

from __future__ import annotations

import argparse
import sys
from contextlib import AbstractContextManager
from pathlib import Path
from typing import IO, Any

from pytest_genguard.cli.inputs import EXIT_FAILED, EXIT_OK, CliError
from pytest_genguard.core.pending import PENDING_DIR, Accepted, Broken, Pending, PendingStore, select

__all__ = ["FLAGS", "PROJECT_MARKS", "accept", "add_arguments", "find_root", "listing", "reject", "review", "run"]

FLAGS = "--list, --accept ID..., --reject ID..., --accept-all or --reject-all"
PROJECT_MARKS = (".git", "pyproject.toml", "pytest.ini", "setup.cfg", "tox.ini", "setup.py")
"""What marks a project's folder: the search for pending traces does not go above it."""


def _file_lock(path: str) -> AbstractContextManager[Any]:
    from filelock import FileLock  # orders this review against a test run writing the same pending trace

    return FileLock(path)


def find_root(root: Path | None) -> Path:
    """The project's rootdir: `root`; else, from here up to the first folder that marks a project (`PROJECT_MARKS`,
    as pytest looks for its rootdir), the nearest whose ``.genguard/pending`` holds pending traces (a run's rootdir
    may be above where it started), else the nearest that has one, else that project folder (or here)."""
    if root is not None:
        if not root.is_dir():
            raise CliError(f"--root {root}: no such folder")
        return root
    here = Path.cwd()
    up: list[Path] = []
    for folder in (here, *here.parents):
        up.append(folder)
        if any((folder / mark).exists() for mark in PROJECT_MARKS):
            break
    found = [d for d in up if (d / PENDING_DIR / "pending").is_dir()]
    holding = [d for d in found if any((d / PENDING_DIR / "pending").glob("*.json"))]
    project = up[-1] if any((up[-1] / mark).exists() for mark in PROJECT_MARKS) else here
    return (holding or found or [project])[0]


def _who(p: Pending) -> str:
    own = p.test.rsplit("::", 1)[-1]
    return p.test if p.name == own else f"{p.test} (snapshot {p.name})"


def listing(store: PendingStore, out: IO[str]) -> int:
    """Each pending trace: its id, test, verdict and one line of what changed."""
    entries = store.entries()
    if not entries:
        out.write(f"no pending traces in {store.folder}\n")
        return EXIT_OK
    out.write(f"{len(entries)} pending in {store.folder} (genguard review --accept ID, --reject ID):\n")
    for entry in entries:
        if isinstance(entry, Broken):
            out.write(f"{entry.id}  (cannot be accepted: {entry.why}; genguard review --reject {entry.id})\n")
        else:
            out.write(f"{entry.id}  {_who(entry)}  {entry.line()}\n")
    return EXIT_OK


def accept(store: PendingStore, entry: Pending | Broken, out: IO[str], err: IO[str]) -> bool:
    """Accept one entry, printing what the new snapshot changed, or why it was refused; whether it was written."""
    if isinstance(entry, Broken):
        err.write(
            f"genguard review: {entry.id} not accepted: {entry.why}; reject it (genguard review --reject "
            f"{entry.id}) and run its test again\n"
        )
        return False
    done = store.accept(entry)
    if isinstance(done, Accepted):
        out.write(f"accepted {entry.id}: {done.lines[0]}\n" + "".join(f"{line}\n" for line in done.lines[1:]))
        return True
    err.write(f"genguard review: {entry.id} ({_who(entry)}) not accepted: " + "\n  ".join(done) + "\n")
    return False


def reject(store: PendingStore, entry: Pending | Broken, out: IO[str]) -> None:
    """Drop one pending trace; its snapshot is left as it is."""
    store.remove(entry.id)
    who = _who(entry) if isinstance(entry, Pending) else "an unreadable record"
    out.write(f"rejected {entry.id}: {who} (its snapshot is unchanged)\n")


def review(
    root: Path,
    *,
    accepting: list[str],
    rejecting: list[str],
    every: str | None,
    out: IO[str] | None = None,
    err: IO[str] | None = None,
) -> int:
    """The flags' work: accept and reject what they name (`every`: "accept" or "reject" all); the exit code."""
    out, err = out or sys.stdout, err or sys.stderr
    store = PendingStore(root, lock=_file_lock)
    entries = store.entries()
    if every is not None:
        accepting, rejecting = ([e.id for e in entries], []) if every == "accept" else ([], [e.id for e in entries])
        if not entries:
            out.write(f"no pending traces in {store.folder}\n")
            return EXIT_OK
    to_accept, unknown = select(entries, accepting)
    to_reject, unknown_r = select(entries, rejecting)
    unknown += unknown_r
    if unknown:
        known = ", ".join(e.id for e in entries) or "none"
        raise CliError(
            f"no pending trace {', '.join(unknown)} in {store.folder} (pending: {known}); list them with: "
            "genguard review --list"
        )
    both = [e.id for e in to_accept if e in to_reject]
    if both:
        raise CliError(f"{', '.join(both)}: named by both --accept and --reject; choose one")
    refused = sum(not accept(store, e, out, err) for e in to_accept)
    for entry in to_reject:
        reject(store, entry, out)
    return EXIT_FAILED if refused else EXIT_OK


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The subcommand's arguments."""
    p.add_argument(
        "--root",
        type=Path,
        default=None,
        metavar="DIR",
        help="the project's rootdir (default: the nearest folder up from here holding .genguard/)",
    )
    only = p.add_mutually_exclusive_group()
    only.add_argument("--list", action="store_true", help="list the pending traces: id, test, what changed")
    only.add_argument("--accept-all", action="store_true", help="accept every pending trace")
    only.add_argument("--reject-all", action="store_true", help="reject every pending trace")
    p.add_argument("--accept", nargs="+", action="extend", default=[], metavar="ID", help="accept these (ids, tests)")
    p.add_argument("--reject", nargs="+", action="extend", default=[], metavar="ID", help="reject these (ids, tests)")


def run(args: argparse.Namespace) -> int:
    """`genguard review` with parsed arguments."""
    root = find_root(args.root)
    chosen = args.accept or args.reject
    if (args.list or args.accept_all or args.reject_all) and chosen:
        raise CliError(
            "--accept and --reject name pending traces; they do not go with --list, --accept-all or --reject-all"
        )
    if args.list:
        return listing(PendingStore(root), sys.stdout)
    if chosen or args.accept_all or args.reject_all:
        every = "accept" if args.accept_all else "reject" if args.reject_all else None
        return review(root, accepting=list(args.accept), rejecting=list(args.reject), every=every)
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise CliError(f"no terminal to review on (standard input or output is not a terminal): pass {FLAGS}")
    from pytest_genguard.cli.review_screen import interactive  # the screen: rich and the terminal's keys

    return interactive(PendingStore(root, lock=_file_lock), accept, reject)
