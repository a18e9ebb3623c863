"""The search of `genguard bisect`, apart from installing anything: which release first gives another verdict.

`search()` takes the ordered releases (the good one first, the bad one last) and a `probe` that replays the snapshot
in one release. It probes both ends, then halves the range between the last release known to give the good verdict
and the first known to differ, as `git bisect` does. A release that does not install is skipped (`git bisect skip`):
the search probes its nearest untested neighbour instead, and when only skipped releases are left between the two,
the result names them all (the change is in one of them). Like `git bisect`, it assumes one change: with several
(a history that goes bad, good again and bad), it names one real transition, a release that differs whose
predecessor gives the good verdict.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

__all__ = ["Outcome", "ProbeResult", "SearchResult", "search"]


@dataclass(frozen=True)
class ProbeResult:
    """What replaying the snapshot in one release gave: its verdict, or why it could not be installed.

    `verdict` is what the search compares ("passed", "regression", "stale", "error", ...); `line` is the verdict line
    shown to the reader (the first line of the failure). `skipped` holds why the release was not probed (it did not
    install), and then `verdict` is empty. `setup` says where it ran: "installed here" (this environment), "cached
    env" or "new env 0.8 s" (the time it took to build).
    """

    version: str
    verdict: str
    line: str
    seconds: float
    environment: str = ""
    skipped: str | None = None
    setup: str = ""


class Outcome(enum.Enum):
    """How a search ended; `genguard bisect`'s exit code follows from it."""

    FOUND = "found"  # the first release that differs is named
    NO_CHANGE = "no change"  # the bad end gives the good end's verdict (or good == bad): nothing to bisect
    INCONCLUSIVE = "inconclusive"  # the change lies among releases that did not install, or an end did not


@dataclass(frozen=True)
class SearchResult:
    """The outcome, the two neighbours around the change (when found) and every probe in the order it ran."""

    outcome: Outcome
    message: str
    good: ProbeResult | None
    first_bad: ProbeResult | None
    candidates: tuple[str, ...] = ()  # INCONCLUSIVE: the releases among which the change lies
    probes: tuple[ProbeResult, ...] = field(default=())


def search(
    versions: Sequence[str],
    probe: Callable[[str], ProbeResult],
    *,
    on_probe: Callable[[ProbeResult], None] | None = None,
) -> SearchResult:
    """Find the first of `versions` (ascending, good first, bad last) whose verdict differs from the first's."""
    if not versions:
        raise ValueError("search(): versions is empty: pass the good release first and the bad one last")
    done: dict[int, ProbeResult] = {}
    order: list[ProbeResult] = []

    def run(index: int) -> ProbeResult:
        result = probe(versions[index])
        done[index] = result
        order.append(result)
        if on_probe is not None:
            on_probe(result)
        return result

    good = run(0)
    if len(versions) == 1:
        return SearchResult(
            Outcome.NO_CHANGE, f"good and bad are the same release ({versions[0]}): nothing to bisect", good, None,
            probes=tuple(order),
        )  # fmt: skip
    if good.skipped is not None:
        return SearchResult(
            Outcome.INCONCLUSIVE, f"the good release {good.version} could not be probed: {good.skipped}", None, None,
            probes=tuple(order),
        )  # fmt: skip
    last = len(versions) - 1
    bad = run(last)
    if bad.skipped is not None:
        return SearchResult(
            Outcome.INCONCLUSIVE, f"the bad release {bad.version} could not be probed: {bad.skipped}", good, None,
            probes=tuple(order),
        )  # fmt: skip
    if bad.verdict == good.verdict:
        message = (
            f"{bad.version} gives the same verdict as {good.version} ({good.verdict}): no release between them "
            "changed it"
        )
        return SearchResult(Outcome.NO_CHANGE, message, good, None, probes=tuple(order))
    lo, hi = 0, last  # versions[lo] gives the good verdict, versions[hi] another one
    while True:
        untested = [i for i in range(lo + 1, hi) if i not in done]
        if not untested:
            break
        middle = (lo + hi) / 2
        index = min(untested, key=lambda i: (abs(i - middle), i))  # the middle, or its nearest untested neighbour
        result = run(index)
        if result.skipped is not None:
            continue
        if result.verdict == good.verdict:
            lo = index
        else:
            hi = index
    between = [versions[i] for i in range(lo + 1, hi)]  # all skipped
    if between:
        names = ", ".join([*between, versions[hi]])
        message = (
            f"the verdict changes after {versions[lo]}, in one of {names}: {len(between)} release(s) between did not "
            "install (see above)"
        )
        return SearchResult(
            Outcome.INCONCLUSIVE, message, done[lo], done[hi], candidates=(*between, versions[hi]), probes=tuple(order)
        )
    message = f"first release with another verdict: {versions[hi]} (last with the good verdict: {versions[lo]})"
    return SearchResult(Outcome.FOUND, message, done[lo], done[hi], probes=tuple(order))
