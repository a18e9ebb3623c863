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
    """``which transformers release changed it: genguard bisect NODEID`` for a regression recorded under another
    transformers (or torch) version; None otherwise (no node id, no version change, not a regression)."""
    if cmp.verdict is not Verdict.REGRESSION or len(targets) != 1 or "::" not in targets[0]:
        return None
    moved = {key: (old, new) for key, old, new in cmp.environment_diff}
    for package in BISECTABLE:
        old, new = moved.get(package, (None, None))
        if old is not None and new is not None and old != new:
            option = "" if package == "transformers" else f" --package {package}"
            command = f"genguard bisect {shlex.quote(targets[0])}{option}"
            return f"which {package} release changed it ({old} -> {new}): {command}"
    return None


def with_bisect_hint(detail: str, cmp: Comparison, targets: Sequence[str]) -> str:
    """`detail` with the bisect hint as its last line, when there is one."""
    hint = bisect_hint(cmp, targets)
    return detail if hint is None else f"{detail}\n\n{hint}"
