"""`GateError`: why `genguard gate` could not run the gate (no docker daemon, a base without torch, no tests, no GPU
runtime, bad input), its message naming what to do; the console script prints it and exits 2."""

from __future__ import annotations

__all__ = ["GateError"]


class GateError(Exception):
    """The gate could not run: never a verdict, always a message that names the fix."""
