"""The releases `genguard bisect` chooses from: listed by the package index through pip (`pip index versions`), which
already leaves out yanked releases, pre-releases unless asked for, and reads the user's pip configuration (index,
extra indexes, find-links)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence

from packaging.version import InvalidVersion, Version

from pytest_genguard.core.errors import ReleaseError

__all__ = ["ReleaseError", "between", "index_versions", "parse_version", "public_release"]


def parse_version(text: str, what: str) -> Version:
    """`text` as a version (``2.13.0+cpu`` too), or a `ReleaseError` naming `what` it is."""
    try:
        return Version(text)
    except InvalidVersion:
        raise ReleaseError(f"{what}: {text!r} is not a version (for example 5.3.0)") from None


def index_versions(package: str, *, pre: bool = False, python: str = sys.executable, timeout: float = 120) -> list[str]:
    """Every release of `package` the index offers (``pip index versions``), newest first as pip lists them.

    With the pip the user has: ``--json`` where pip has it, else the line "Available versions: ..." that every pip
    with ``pip index`` (21.2 and later) prints, such as the pip 23.2.1 a fresh ``python -m venv`` gets."""
    done = _pip_index(package, pre, python, timeout, json_output=True)
    if done.returncode != 0 and "no such option: --json" in done.stderr:
        done = _pip_index(package, pre, python, timeout, json_output=False)
        _check(done, package)
        return _versions_line(done.stdout, package)
    _check(done, package)
    try:
        versions = json.loads(done.stdout)["versions"]
    except (ValueError, KeyError, TypeError):
        raise ReleaseError(f"pip index versions {package}: unexpected output {done.stdout[:200]!r}") from None
    return [str(v) for v in versions]


def _pip_index(
    package: str, pre: bool, python: str, timeout: float, *, json_output: bool
) -> subprocess.CompletedProcess[str]:
    command = [python, "-m", "pip", "index", "versions", "--disable-pip-version-check", package]
    command += ["--json"] if json_output else []
    command += ["--pre"] if pre else []
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ReleaseError(f"listing the releases of {package} ({' '.join(command[1:])}) failed: {exc}") from None


def _check(done: subprocess.CompletedProcess[str], package: str) -> None:
    if done.returncode == 0:
        return
    tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
    if 'unknown command "index"' in done.stderr:
        raise ReleaseError(
            f"listing the releases of {package}: this pip has no `pip index` command ({tail}); genguard bisect lists "
            "releases with `pip index versions`, which needs pip 21.2 or newer: python -m pip install --upgrade pip, "
            "or pass both --good and --bad"
        )
    raise ReleaseError(
        f"listing the releases of {package} with pip failed (exit {done.returncode}): {tail}; check the package "
        "name and that the package index (pip's index-url) can be reached, or pass both --good and --bad"
    )


_AVAILABLE = "Available versions:"


def _versions_line(stdout: str, package: str) -> list[str]:
    """The releases of pip's text answer (``fakepkg (1.1.0)`` then ``Available versions: 1.1.0, 1.0.0``)."""
    for line in stdout.splitlines():
        if line.startswith(_AVAILABLE):
            return [v.strip() for v in line.removeprefix(_AVAILABLE).split(",") if v.strip()]
    raise ReleaseError(f"pip index versions {package}: unexpected output {stdout[:200]!r}")


def public_release(version: str) -> Version:
    """The release a version names: ``2.13.0+cpu`` (a local build, such as the CPU wheel) is release 2.13.0."""
    return Version(Version(version).public)


def between(available: Sequence[str], good: str, bad: str) -> list[str]:
    """The releases from `good` to `bad` (both included, ascending; either may be absent from `available`, e.g. a local
    ``+cpu`` build: it is compared by its public version and kept as given). Raises ReleaseError when good > bad."""
    low = public_release(str(parse_version(good, "--good")))
    high = public_release(str(parse_version(bad, "--bad")))
    if low > high:
        raise ReleaseError(f"--good {good} is newer than --bad {bad}: swap them")
    # By public version: a local build (2.13.0+cpu from a find-links folder) is the release it builds, and installs as
    # ``==2.13.0`` anyway; it must neither count twice nor fall between good and bad when it is the good one.
    inner = sorted({public_release(v) for v in available if _is_version(v) and low < public_release(v) < high})
    if low == high:
        return [good]
    return [good, *(str(v) for v in inner), bad]


def _is_version(text: str) -> bool:
    try:
        Version(text)
    except InvalidVersion:
        return False
    return True
