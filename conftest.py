"""Root conftest: settings every test process needs (the project's tests, the examples, pytester subprocesses).

Each tier under tests/ (core, hf, plugin, project) has its own conftest with what its tests share.
"""

import os

# One intra-op thread per process: the suite runs as `pytest -n 2` on 2 cores, and two threads per worker made tiny
# models ~8x slower there. Set before torch is first imported; xdist workers and pytester subprocesses inherit it.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# The plugin tests (and some hf tests) drive pytest itself; a top-level conftest is the only place pytest accepts this.
pytest_plugins = ["pytester"]
