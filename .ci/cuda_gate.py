#!/usr/bin/env python3
"""The Python half of .ci/cuda-gate (standard library only): the gate's command for a device, and its verdict.

    python3 .ci/cuda_gate.py command cpu|gpu < CMD.json      # the image's CMD for that device, NUL-separated
    python3 .ci/cuda_gate.py verdict JUNIT.xml cpu|gpu ROOT  # exit 0 only when the gate passed; names what failed

The image's CMD is the GPU gate. On the CPU the command is the same minus `--genguard-gpu`, chosen by the caller
(`.ci/cuda-gate` without `--gpu`), never detected: a GPU runner whose GPU is not usable runs the CMD as it is, and the
plugin stops it with a usage error.

The verdict reads the JUnit XML the gate wrote: no test run, a failure or an error fails it, and so does a skip the
device does not explain. Everything the gate selects must run in the image: on the CPU the only skips allowed are the
GPU-only tests (`@pytest.mark.genguard_gpu`, skipped "needs CUDA, run with --genguard-gpu"); on the GPU none.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

GPU_FLAG = "--genguard-gpu"
GPU_SKIP = "genguard_gpu test: needs CUDA"
"""The plugin's reason for skipping a `genguard_gpu` test without `--genguard-gpu` (pytest_genguard/plugin)."""
DEVICES = ("cpu", "gpu")


def command(cmd: list[str], device: str) -> list[str]:
    """The image's CMD (the GPU gate) for `device`: as it is on the GPU, without `--genguard-gpu` on the CPU."""
    if cmd.count(GPU_FLAG) != 1:
        raise SystemExit(f"cuda_gate: the image's CMD must hold {GPU_FLAG} exactly once (it is the GPU gate): {cmd}")
    return [arg for arg in cmd if arg != GPU_FLAG] if device == "cpu" else list(cmd)


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


def _device(value: str) -> str:
    if value not in DEVICES:
        raise SystemExit(f"cuda_gate: the device is cpu or gpu, not {value!r}")
    return value


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "command":
        sys.stdout.write("\0".join(command(json.load(sys.stdin), _device(argv[1]))))
        return 0
    if len(argv) == 4 and argv[0] == "verdict":
        junit, device, root = Path(argv[1]), _device(argv[2]), Path(argv[3])
        if not junit.is_file():
            print(f"cuda-gate: FAILED: the gate wrote no JUnit XML ({junit}): it did not run", file=sys.stderr)
            return 1
        verdict = read_verdict(junit, device, root)
        print(f"cuda-gate: {verdict.summary()} on the {device.upper()}")
        for label, nodes in (
            ("failed", verdict.failed),
            ("errors", verdict.errors),
            ("skipped, though the gate must run them here", verdict.unexplained_skips),
        ):
            if nodes:
                print(f"cuda-gate: FAILED: {len(nodes)} {label}:", *nodes, sep="\n  ", file=sys.stderr)
        if verdict.tests == 0 or verdict.passed == 0:
            print(f"cuda-gate: FAILED: no test passed ({junit})", file=sys.stderr)
        return 0 if verdict.ok else 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
