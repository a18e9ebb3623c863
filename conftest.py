"""Root conftest: the project's own tests drive the plugin through pytester."""

import os

# One intra-op thread per process: the suite runs as `pytest -n 2` on 2 cores, and two threads per worker made tiny
# models ~8x slower there. Set before torch is first imported; xdist workers and pytester subprocesses inherit it.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# hypothesis' pytest plugin imports hypothesis at the end of every session. pytester's in-process runs restore
# sys.modules afterwards, so unless hypothesis is already imported out here each in-process run imports it again
# (measured: 7.4 s -> 0.5 s for a one-test pytester run on 2 busy cores).
import hypothesis  # noqa: F401

pytest_plugins = ["pytester"]
