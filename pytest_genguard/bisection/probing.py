"""Replaying a snapshot test in one release's environment: the test node runs there under pytest (so it checks its
snapshot exactly as it does at home: teacher forced where it uses ``genguard_snapshot.verify()``, re-generated where it
asserts ``record(...) == genguard_snapshot``), with the probe plugin (`pytest_genguard.plugin.probe`) writing what
happened; its verdict is read back here. Nothing is written to the snapshot: no update option is passed."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_genguard.bisection.environments import Environments, InstallError, installed
from pytest_genguard.bisection.search import ProbeResult

__all__ = ["PASSED", "Prober", "verdict_of"]

PASSED = "passed"
PROBE_PLUGIN = "pytest_genguard.plugin.probe"
PROBE_ENV_VAR = "GENGUARD_BISECT_PROBE"  # plugin.probe.ENV_VAR (the plugin tier is not imported here)
_CHECK_KINDS = ("snapshot", "verify", "reference")


def verdict_of(document: Mapping[str, Any], nodeid: str) -> tuple[str, str, str]:
    """(verdict, verdict line, environment line) of `nodeid` in a probe document.

    The verdict is "passed" when the test passed (its snapshots held: identical, within tolerance, a tolerated near
    tie), else the verdict of its first failing genguard check ("regression", "stale", ...), else "failed" or "error"
    (the test failed or broke outside a genguard check)."""
    tests = [t for t in document.get("tests", []) if _same_node(str(t.get("nodeid", "")), nodeid)]
    versions = document.get("versions", {})
    environment = " / ".join(f"{k} {v}" for k, v in sorted(versions.items()) if v)
    if not tests:
        status = document.get("exitstatus")
        return "error", f"error: pytest ran no test {nodeid} (exit {status}): check the node id", environment
    checks = [e for t in tests for e in t.get("events", []) if e.get("kind") in _CHECK_KINDS]
    for event in checks:
        if event.get("failure"):
            detail = str(event.get("detail") or event.get("summary") or "")
            lines = detail.splitlines()
            moved = next((line for line in lines[1:3] if line.startswith("recorded on ")), None)
            return (
                str(event.get("verdict")),
                _short(lines[0] if lines else str(event.get("verdict"))),
                moved or environment,
            )
    broken = next((t for t in tests if t.get("outcome") != "passed"), None)
    if broken is None:
        seen = ", ".join(dict.fromkeys(str(e.get("verdict")) for e in checks)) or "no genguard check"
        return PASSED, f"passed ({seen})", environment
    kind = "error" if broken.get("when") != "call" else ("skipped" if broken.get("outcome") == "skipped" else "failed")
    message = (str(broken.get("message") or "").strip().splitlines() or ["(no message)"])[0]
    return kind, _short(f"{kind}: {message}"), environment


def _same_node(reported: str, wanted: str) -> bool:
    return reported == wanted or reported.endswith("/" + wanted) or wanted.endswith("/" + reported)


def _short(line: str, width: int = 240) -> str:
    line = line.strip()
    return line if len(line) <= width else line[: width - 1] + "…"


@dataclass(frozen=True)
class Prober:
    """Probes one release: builds (or reuses) its environment, runs the test node there, reads its verdict."""

    nodeid: str
    environments: Environments
    rootdir: Path
    pytest_args: Sequence[str] = ()
    timeout_s: float = 600

    def _in_process(self) -> list[str]:
        """``-n 0`` where pytest-xdist is installed: one test needs no workers (each would import torch again), and
        an ``addopts = -n 2`` in the user's configuration stays valid (``-p no:xdist`` would make ``-n`` an error)."""
        return ["-n", "0"] if "pytest-xdist" in installed(self.environments.base) else []

    def __call__(self, version: str) -> ProbeResult:
        start = time.monotonic()
        try:
            python, reused = self.environments.ensure(version)
        except InstallError as exc:
            return ProbeResult(version, "", "", time.monotonic() - start, skipped=str(exc))
        if self.environments.is_home(version):
            setup = "installed here"
        else:
            setup = "cached env" if reused else f"new env {time.monotonic() - start:.1f} s"
        with tempfile.TemporaryDirectory(prefix="genguard-probe-") as scratch:
            out = Path(scratch) / "probe.json"
            env = {**os.environ, PROBE_ENV_VAR: str(out)}
            env.pop("PYTEST_ADDOPTS", None)
            env.pop("VIRTUAL_ENV", None)
            command = [
                str(python), "-m", "pytest", self.nodeid, "-p", PROBE_PLUGIN, "-p", "no:cacheprovider", "-q",
                "--no-header", "-p", "no:randomly", *self._in_process(), *self.pytest_args,
            ]  # fmt: skip
            try:
                done = subprocess.run(
                    command, cwd=self.rootdir, env=env, capture_output=True, text=True, timeout=self.timeout_s
                )
            except subprocess.TimeoutExpired:
                line = f"error: the test ran past {self.timeout_s:.0f} s"
                return ProbeResult(version, "error", line, time.monotonic() - start, setup=setup)
            try:
                document = json.loads(out.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                tail = (done.stdout + done.stderr).strip().splitlines()[-1:] or ["(no output)"]
                line = _short(f"error: pytest did not report (exit {done.returncode}): {tail[0]}")
                return ProbeResult(version, "error", line, time.monotonic() - start, setup=setup)
        verdict, line, environment = verdict_of(document, self.nodeid)
        return ProbeResult(version, verdict, line, time.monotonic() - start, environment, setup=setup)
