"""Running an inner pytest where permission bits bite. As a normal user they always do; root ignores them, so as
root the command runs under setpriv with the capabilities that bypass them (dac_override, dac_read_search, fowner)
dropped from its bounding set: still uid 0, but a folder with mode 0555 is then read-only for it too."""

from __future__ import annotations

import os
import shutil
import sys

import pytest

DROP = "-dac_override,-dac_read_search,-fowner"


def unprivileged_python() -> list[str]:
    """The command that runs this Python where permission bits bite (skips the test when that cannot be had)."""
    if os.geteuid() != 0:
        return [sys.executable]
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv (util-linux): permission bits cannot be made to bite")
    return [setpriv, "--bounding-set", DROP, sys.executable]


def run_read_only(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, *args: str) -> pytest.RunResult:
    """`pytest *args` in pytester's folder as a subprocess for which read-only folders are read-only."""
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)
    return pytester.run(*unprivileged_python(), "-m", "pytest", "-p", "no:cacheprovider", *args)
