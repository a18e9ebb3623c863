"""The gate's verdict, read from the JUnit XML its pytest wrote: no test run, a failure or an error fails it, and so
does a skip the device does not explain. Everything the gate selects must run in the image: on the CPU the only skips
allowed are the GPU-only tests (`@pytest.mark.genguard_gpu`, skipped "needs CUDA, run with --genguard-gpu"); on the
GPU none.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

__all__ = ["GPU_SKIP", "Verdict", "node_id", "read_verdict", "report_verdict"]

GPU_SKIP = "genguard_gpu test: needs CUDA"
"""The plugin's reason for skipping a `genguard_gpu` test without `--genguard-gpu` (pytest_genguard/plugin)."""


@dataclass
class Verdict:
    """What the gate's JUnit XML says: counts, and the tests that fail the gate with why."""

    tests: int = 0
    passed: int = 0
    gpu_skipped: int = 0
    failed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    unexplained_skips: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.tests > 0 and self.passed > 0 and not (self.failed or self.errors or self.unexplained_skips)

    def summary(self) -> str:
        return (
            f"{self.passed} passed, {len(self.failed)} failed, {len(self.errors)} errors, "
            f"{self.gpu_skipped + len(self.unexplained_skips)} skipped ({self.gpu_skipped} GPU-only) "
            f"of {self.tests} tests"
        )

    def problems(self) -> list[tuple[str, list[str]]]:
        """(label, nodes) of what fails the gate, in the order they are printed."""
        found = [
            ("failed", self.failed),
            ("errors", self.errors),
            ("skipped, though the gate must run them here", self.unexplained_skips),
        ]
        return [(label, nodes) for label, nodes in found if nodes]


def node_id(classname: str, name: str, root: Path) -> str:
    """pytest's node id from a JUnit testcase: `examples.test_decoding`, `test_x` -> `examples/test_decoding.py::test_x`
    (the longest dotted prefix that is a file under `root`; the rest are classes)."""
    parts = classname.split(".") if classname else []
    for cut in range(len(parts), 0, -1):
        path = "/".join(parts[:cut]) + ".py"
        if (root / path).is_file():
            return "::".join([path, *parts[cut:], name])
    return "::".join([*parts, name]) if parts else name


def read_verdict(junit: Path, device: str, root: Path) -> Verdict:
    """The verdict of the JUnit XML `junit` of a run on `device` ("cpu" or "gpu") of the project in `root`."""
    verdict = Verdict()
    for case in ET.parse(junit).getroot().iter("testcase"):
        verdict.tests += 1
        node = node_id(case.get("classname", ""), case.get("name", ""), root)
        outcome = {child.tag: child for child in case if child.tag in ("failure", "error", "skipped")}
        if "failure" in outcome:
            verdict.failed.append(node)
        elif "error" in outcome:
            verdict.errors.append(node)
        elif "skipped" in outcome:
            reason = outcome["skipped"].get("message", "") or (outcome["skipped"].text or "")
            if device == "cpu" and GPU_SKIP in reason:
                verdict.gpu_skipped += 1
            else:
                verdict.unexplained_skips.append(f"{node} ({reason.strip() or 'no reason given'})")
        else:
            verdict.passed += 1
    return verdict


def report_verdict(junit: Path, device: str, root: Path, out: IO[str]) -> bool:
    """Print the verdict of `junit` to `out`, each test that fails the gate named; whether the gate passed."""
    if not junit.is_file():
        print(f"genguard gate: FAILED: the gate wrote no JUnit XML ({junit}): it did not run", file=out)
        return False
    verdict = read_verdict(junit, device, root)
    print(f"genguard gate: {verdict.summary()} on the {device.upper()}", file=out)
    for label, nodes in verdict.problems():
        print(f"genguard gate: FAILED: {len(nodes)} {label}:", *nodes, sep="\n  ", file=out)
    if verdict.tests == 0:
        print(
            "genguard gate: FAILED: no tests ran: name them in [tool.pytest.ini_options] testpaths, "
            "[tool.genguard.gate] args or after --",
            file=out,
        )
    elif verdict.passed == 0:
        print(f"genguard gate: FAILED: no test passed ({junit})", file=out)
    return verdict.ok
