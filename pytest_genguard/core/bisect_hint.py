"""The last line of a snapshot failure whose environment shows a new transformers or torch release: the
`genguard bisect` command that names the release which changed it."""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from pytest_genguard.core.comparison import Comparison
from pytest_genguard.core.verdict import Verdict

__all__ = ["BISECTABLE", "bisect_hint", "with_bisect_hint"]

BISECTABLE = ("transformers", "torch")


def bisect_hint(cmp: Comparison, targets: Sequence[str]) -> str | None:
    """``which transformers release changed it (5.21.1 -> 5.23.0): genguard bisect NODEID`` for a regression recorded
    under another transformers (or torch) version, both commands when both moved; None otherwise (no node id, no
    version change, not a regression)."""
    if cmp.verdict is not Verdict.REGRESSION or len(targets) != 1 or "::" not in targets[0]:
        return None
    diff = {key: (old, new) for key, old, new in cmp.environment_diff}
    moved = [(package, *diff[package]) for package in BISECTABLE if package in diff]
    moved = [(package, old, new) for package, old, new in moved if old is not None and new is not None and old != new]
    if not moved:
        return None
    node = shlex.quote(targets[0])
    commands = [f"genguard bisect {node}" + ("" if p == "transformers" else f" --package {p}") for p, _, _ in moved]
    if len(moved) == 1:
        package, old, new = moved[0]
        return f"which {package} release changed it ({old} -> {new}): {commands[0]}"
    changes = ", ".join(f"{package} {old} -> {new}" for package, old, new in moved)
    return f"which release changed it ({changes}): {', or '.join(commands)}"


def with_bisect_hint(detail: str, cmp: Comparison, targets: Sequence[str]) -> str:
    """`detail` with the bisect hint as its last line, when there is one."""
    hint = bisect_hint(cmp, targets)
    return detail if hint is None else f"{detail}\n\n{hint}"
