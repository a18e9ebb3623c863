"""Checks of the genguard options and ini values, run once in `pytest_configure`.

A bad value must stop the run before any test does: an invalid tolerance used to fail every test with a raw
`ValueError`, and under ``--snapshot-update`` syrupy then deleted every snapshot as unused. Each check raises
`pytest.UsageError` (exit code 4) naming the option or ini key, the value and what is accepted. Torch-free.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import pytest

__all__ = ["TOLERANCE_EXAMPLES", "check_folder", "check_writable_file", "tolerance_ini", "where_ini"]

TOLERANCE_EXAMPLES = {"atol": "1e-6", "rtol": "1e-4", "tie_tol": "1e-3"}
"""An example value per tolerance (the float32 defaults), for messages."""


def where_ini(config: pytest.Config, name: str) -> str:
    """Where an ini value came from, for messages: ``-o name=...`` or the ini file."""
    overrides = config.getoption("override_ini", default=None) or []
    if any(str(o).split("=", 1)[0].strip() == name for o in overrides):
        return "set with -o"
    return f"in {config.inipath}" if config.inipath is not None else "no ini file"


def tolerance_ini(config: pytest.Config, name: str) -> float | None:
    """The float value of a ``genguard_<tolerance>`` ini key (None when unset); a UsageError when it is not a finite
    number >= 0: NaN compares false with everything, and an infinite tolerance would accept any drift."""
    raw = config.getini(name)
    if raw in (None, ""):
        return None
    text = str(raw).strip()
    example = TOLERANCE_EXAMPLES.get(name.removeprefix("genguard_"), "1e-5")
    head = f"ini option {name} = {text!r}"
    fix = (
        f"({where_ini(config, name)}); a tolerance is a finite number >= 0: write e.g. {name} = {example}, or remove "
        "it to use the dtype default"
    )
    try:
        value = float(text)
    except ValueError:
        raise pytest.UsageError(f"{head} is not a number {fix}") from None
    if math.isnan(value):
        raise pytest.UsageError(f"{head} is not a number (NaN) {fix}")
    if math.isinf(value):
        raise pytest.UsageError(f"{head} is infinite: it would accept any drift {fix}")
    if value < 0:
        raise pytest.UsageError(f"{head} is negative {fix}")
    return value


def _nearest_existing(path: Path) -> Path:
    """`path` or its closest ancestor that exists."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path(path.anchor or ".")


def check_folder(path: Path, what: str, fix: str) -> None:
    """A folder genguard may create: it must be a folder, or creatable (no file in the way). `what` names the
    setting ("ini option genguard_cache_dir = '...' in pytest.ini"), `fix` says what to do."""
    if path.exists() and not path.is_dir():
        raise pytest.UsageError(f"{what}: {path} is a file, not a folder; {fix}")
    found = _nearest_existing(path)
    if not found.is_dir():
        raise pytest.UsageError(f"{what}: {path} cannot be created because {found} is a file; {fix}")


def check_writable_file(path: Path, what: str, fix: str) -> None:
    """A file genguard will write at the end of the run: fail now, not after the tests, when it cannot be written.

    The check creates (and removes) a temporary file in the target folder, or in its nearest existing ancestor when
    the folder will be created: what the write itself will need. Nothing is left behind.
    """
    if path.is_dir():
        raise pytest.UsageError(f"{what}: {path} is a folder; {fix}")
    check_folder(path.parent, what, fix)
    probe_in = _nearest_existing(path.parent)
    try:
        with tempfile.TemporaryFile(dir=probe_in):
            pass
    except OSError as exc:
        raise pytest.UsageError(f"{what}: cannot write in {probe_in} ({exc.strerror or exc}); {fix}") from None
