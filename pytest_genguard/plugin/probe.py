"""The probe side of `genguard bisect`: loaded with ``-p pytest_genguard.plugin.probe`` in the environment of one
release, it writes what each test did (outcome, the failure's message, its genguard events) and the torch and
transformers versions to the JSON file named by ``GENGUARD_BISECT_PROBE``, where the bisect driver
(`pytest_genguard.bisection.probing`) reads the verdict. Without that variable it does nothing.

Once pytest is done (its last ``pytest_unconfigure``), a probe process ends at once (``os._exit`` with pytest's exit
status): the verdict is written by then, and the interpreter's teardown, torch's included, would add 1-3 s to every
probe."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from pytest_genguard.core.files import atomic_write_text
from pytest_genguard.plugin.tally import USER_PROPERTY

ENV_VAR = "GENGUARD_BISECT_PROBE"


@dataclass
class ProbeWriter:
    """Collects the reports of the run and writes them at its end."""

    target: Path
    tests: list[dict[str, Any]] = field(default_factory=list)
    exitstatus: int = 0

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call" and report.outcome == "passed":
            return
        events: list[Any] = []
        for name, value in report.user_properties:
            if name == USER_PROPERTY and isinstance(value, list):
                events += value
        crash = getattr(report.longrepr, "reprcrash", None)
        message = str(getattr(crash, "message", "") or (report.longreprtext.strip().splitlines() or [""])[-1])
        self.tests.append(
            {
                "nodeid": report.nodeid,
                "when": report.when,
                "outcome": report.outcome,
                "message": message,
                "events": events,
            }
        )

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        versions: dict[str, str | None] = {}
        for name in ("torch", "transformers"):
            try:
                versions[name] = metadata.version(name)
            except metadata.PackageNotFoundError:
                versions[name] = None
        self.exitstatus = int(exitstatus)
        document = {"exitstatus": self.exitstatus, "versions": versions, "tests": self.tests}
        atomic_write_text(self.target, json.dumps(document, indent=1) + "\n")

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(self.exitstatus)


def pytest_configure(config: pytest.Config) -> None:
    target = os.environ.get(ENV_VAR)
    if target:
        config.pluginmanager.register(ProbeWriter(Path(target)), "genguard-bisect-probe")
