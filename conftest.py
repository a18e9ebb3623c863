"""Root conftest: settings every test process needs (the project's tests, the examples, pytester subprocesses).

Each tier under tests/ (core, hf, plugin, project) has its own conftest with what its tests share.
"""

import os

import pytest

# One intra-op thread per process: the suite runs as `pytest -n 2` on 2 cores, and two threads per worker made tiny
# models ~8x slower there. Set before torch is first imported; xdist workers and pytester subprocesses inherit it.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# The plugin tests (and some hf tests) drive pytest itself; a top-level conftest is the only place pytest accepts this.
pytest_plugins = ["pytester"]

# A team's project that `genguard gate` gates in CI (the CUDA lane): its tests import its own package, installed
# only in its image, so this suite does not collect them.
collect_ignore = ["tests/team_project"]


@pytest.fixture
def pytester(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """pytester's, with pytest-randomly (where installed) kept out of its runs: in-process runs load the entry-point
    plugins anew, subprocesses too, whatever `-p no:randomly` the outer run was given, and an inner test that
    expects which of two tests runs second (the case-clash test) then depends on the seed. pytester clears
    PYTEST_ADDOPTS when it is made; set after that, it reaches both kinds of runs."""
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p no:randomly")
    return pytester
