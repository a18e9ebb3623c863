"""What `genguard bisect` prints: one progress line per probe as it finishes, then the finding; and its exit codes."""

from __future__ import annotations

from typing import TextIO

from pytest_genguard.bisection.driver import BisectResult
from pytest_genguard.bisection.search import Outcome, ProbeResult

__all__ = ["EXIT_CODES", "finding_lines", "print_finding", "progress_line"]

# 0: the first release with another verdict is named; 1: no change between good and bad (or good == bad);
# 2: bad input (the console script's usage code); 3: inconclusive (releases that did not install hide the change,
# or an end of the range did not install).
EXIT_CODES = {Outcome.FOUND: 0, Outcome.NO_CHANGE: 1, Outcome.INCONCLUSIVE: 3}


def progress_line(package: str, probe: ProbeResult) -> str:
    """``  transformers 5.2.0     12.1 s  new env 0.8 s   regression: prompt 0 ... diverges at step 3 ...`` (or
    ``skipped: why``): the release, the probe's time (building its environment included) and the verdict line."""
    head = f"  {package} {probe.version:<10} {probe.seconds:6.1f} s  " + (f"{probe.setup:<15} " if probe.setup else "")
    if probe.skipped is not None:
        return head + f"skipped: {probe.skipped}"
    return head + probe.line


def _neighbour(label: str, package: str, probe: ProbeResult) -> list[str]:
    lines = [f"  {label:<10} {package} {probe.version}: {probe.line}"]
    if probe.environment:
        lines.append(f"  {'':<10} {probe.environment}")
    return lines


def finding_lines(result: BisectResult) -> list[str]:
    """The finding: the message, then both neighbours' verdict lines and environment lines."""
    search = result.search
    lines = [search.message]
    if search.good is not None and search.first_bad is not None:
        lines += _neighbour("good", result.package, search.good)
        lines += _neighbour("first bad" if result.outcome is Outcome.FOUND else "bad", result.package, search.first_bad)
    probed = [p for p in result.probes if p.skipped is None]
    if probed:
        mean = sum(p.seconds for p in probed) / len(probed)
        lines.append(f"{len(result.probes)} probes in {result.seconds:.0f} s ({mean:.1f} s per installed probe)")
    return lines


def print_finding(result: BisectResult, out: TextIO) -> None:
    out.write("\n".join(finding_lines(result)) + "\n")
