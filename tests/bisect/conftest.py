"""The end-to-end bisect cases install real releases (from the package index, under a minute each here): they run
where GENGUARD_BISECT_E2E=1, as in .ci/run's "genguard bisect" leg."""

import os

import pytest

E2E_VAR = "GENGUARD_BISECT_E2E"


def pytest_configure(config):
    config.addinivalue_line("markers", f"bisect_e2e: installs real releases; runs with {E2E_VAR}=1 (.ci/run does)")


def pytest_collection_modifyitems(config, items):
    if os.environ.get(E2E_VAR) == "1":
        return
    skip = pytest.mark.skip(reason=f"installs real releases: run with {E2E_VAR}=1 (the .ci/run bisect leg does)")
    for item in items:
        if "bisect_e2e" in item.keywords:
            item.add_marker(skip)
