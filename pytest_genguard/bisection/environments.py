"""One isolated virtual environment per probed release, built with uv and kept for the next bisect.

Each holds the probed release of the bisected package and every other package of the running environment pinned at
its installed version (editable installs, this checkout of pytest-genguard among them, stay editable). uv does not
read pip's configuration, and without pip's find-links it would fetch the multi-GB CUDA torch where pip takes the CPU
wheel from local disk: `PackageSources.from_pip()` hands pip's find-links and indexes (``pip config list``, which
includes ``PIP_FIND_LINKS`` and ``PIP_EXTRA_INDEX_URL``) to uv, and ``--find-links`` adds more.

Environments live under ``<genguard cache>/bisect/`` (``$GENGUARD_CACHE_DIR``, else the user cache dir), one folder
per (package, release, pins, sources, python), marked ready only once the install finished; a file lock keeps two
bisects from building the same one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

import platformdirs
from filelock import FileLock

from pytest_genguard.core.files import atomic_write_text

__all__ = [
    "CACHE_ENV_VAR",
    "Environments",
    "InstallError",
    "PackageSources",
    "cache_root",
    "find_uv",
    "installed_requirements",
]

CACHE_ENV_VAR = "GENGUARD_CACHE_DIR"
READY = "genguard-bisect-env.json"
_INSTALL_TIMEOUT_S = 900


class InstallError(Exception):
    """A release could not be installed (the message holds uv's last lines); the search skips it."""


def cache_root() -> Path:
    """`$GENGUARD_CACHE_DIR`, else the user cache dir: where genguard keeps what it builds outside pytest."""
    configured = os.environ.get(CACHE_ENV_VAR)
    return Path(configured) if configured else Path(platformdirs.user_cache_dir("genguard"))


def find_uv() -> str:
    """The uv executable (on PATH, or next to this interpreter); an InstallError saying how to get it otherwise."""
    beside = Path(sys.executable).parent / "uv"
    found = shutil.which("uv") or (str(beside) if beside.exists() else None)
    if found is None:
        raise InstallError("genguard bisect builds its environments with uv, which is not installed: pip install uv")
    return found


@dataclass(frozen=True)
class PackageSources:
    """Where packages come from, as uv options: find-links folders, the index and extra indexes."""

    find_links: tuple[str, ...] = ()
    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()

    @classmethod
    def from_pip(cls, extra_find_links: Sequence[str] = (), python: str = sys.executable) -> PackageSources:
        """pip's configuration (files and ``PIP_*`` variables, as ``pip config list`` shows them), plus
        `extra_find_links` first."""
        values: dict[str, str] = {}
        try:
            listed = subprocess.run(
                [python, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60, check=False
            ).stdout
        except (OSError, subprocess.TimeoutExpired):
            listed = ""
        for line in listed.splitlines():  # global.find-links='/opt/wheels', :env:.find-links='...'
            key, _, value = line.partition("=")
            scope, _, name = key.rpartition(".")
            if name and (scope == ":env:" or name not in values):  # the environment wins over the files
                values[name] = value.strip().strip("'\"")
        return cls(
            find_links=(*extra_find_links, *values.get("find-links", "").split()),
            index_url=values.get("index-url") or None,
            extra_index_urls=tuple(values.get("extra-index-url", "").split()),
        )

    def uv_args(self) -> list[str]:
        args: list[str] = []
        for folder in self.find_links:
            args += ["--find-links", folder]
        if self.index_url:
            args += ["--index-url", self.index_url]
        for url in self.extra_index_urls:
            args += ["--extra-index-url", url]
        if self.extra_index_urls:  # pip's rule: the best version from every index (uv's default stops at the first)
            args += ["--index-strategy", "unsafe-best-match"]
        return args


def _normal(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def installed_requirements(exclude: Sequence[str] = ()) -> list[str]:
    """The running environment's packages as requirements: ``name==version``, ``-e <folder>`` for editable installs,
    ``name @ url`` for other direct installs; `exclude` (and pip, setuptools, wheel, uv) left out."""
    skip = {_normal(n) for n in (*exclude, "pip", "setuptools", "wheel", "uv")}
    found: dict[str, str] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if not name or _normal(name) in skip:
            continue
        # A source checkout on sys.path shows its *.egg-info too: the installed record (direct_url.json) wins.
        if _normal(name) not in found or dist.read_text("direct_url.json"):
            found[_normal(name)] = _requirement(dist, name)
    return [found[key] for key in sorted(found)]


def _requirement(dist: metadata.Distribution, name: str) -> str:
    direct = dist.read_text("direct_url.json")
    if direct:
        try:
            info = json.loads(direct)
        except ValueError:
            info = {}
        url = str(info.get("url", ""))
        if info.get("dir_info", {}).get("editable") and url.startswith("file://"):
            return f"-e {unquote(urlparse(url).path)}"
        if url and "vcs_info" in info:
            vcs = info["vcs_info"]
            return f"{name} @ {vcs.get('vcs', 'git')}+{url}@{vcs.get('commit_id', '')}"
        if url and not url.startswith("file://"):
            return f"{name} @ {url}"
    return f"{name}=={dist.version}"


@dataclass(frozen=True)
class Environments:
    """Builds (or reuses) the environment of one release of `package`; `pinned` are the other requirements."""

    package: str
    pinned: tuple[str, ...]
    sources: PackageSources
    root: Path
    python: str = sys.executable
    relaxable: tuple[str, ...] = ()
    """Pins dropped on a second try when the first does not resolve: the bisected package's own dependencies, which
    an older or newer release may need at other versions."""

    def key(self, version: str) -> str:
        spec = {
            "package": _normal(self.package),
            "version": version,
            "pinned": sorted(self.pinned),
            "sources": self.sources.uv_args(),
            "python": ".".join(map(str, sys.version_info[:3])),
        }
        digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]
        return f"{_normal(self.package)}-{version}-{digest}"

    def python_of(self, version: str) -> Path:
        return self.root / self.key(version) / "bin" / "python"

    def ensure(self, version: str) -> tuple[Path, bool]:
        """The environment's python for `version`, and whether it was reused; InstallError when uv cannot build it."""
        folder = self.root / self.key(version)
        self.root.mkdir(parents=True, exist_ok=True)
        with FileLock(str(folder) + ".lock"):
            if (folder / READY).exists():
                return folder / "bin" / "python", True
            if folder.exists():
                shutil.rmtree(folder)  # a build that did not finish
            try:
                self._build(folder, version, self.pinned)
            except InstallError:
                shutil.rmtree(folder, ignore_errors=True)
                relaxed = tuple(
                    pin for pin in self.pinned if _pin_name(pin) not in {_normal(n) for n in self.relaxable}
                )
                if relaxed == self.pinned:
                    raise
                try:
                    self._build(folder, version, relaxed)
                except InstallError:
                    shutil.rmtree(folder, ignore_errors=True)
                    raise
            atomic_write_text(folder / READY, json.dumps({"package": self.package, "version": version}) + "\n")
        return folder / "bin" / "python", False

    def _build(self, folder: Path, version: str, pinned: Sequence[str]) -> None:
        uv = find_uv()
        env = dict(os.environ)
        env.pop("VIRTUAL_ENV", None)
        self._uv([uv, "venv", "--quiet", "--python", self.python, str(folder)], env, version)
        requirement = f"{self.package}=={_public(version)}"
        args: list[str] = []
        for pin in pinned:
            args += shlex.split(pin)
        command = [uv, "pip", "install", "--quiet", "--python", str(folder / "bin" / "python"), requirement, *args]
        self._uv(command + self.sources.uv_args(), env, version)

    def _uv(self, command: list[str], env: dict[str, str], version: str) -> None:
        start = time.monotonic()
        try:
            done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=_INSTALL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise InstallError(f"{self.package} {version}: uv gave up after {_INSTALL_TIMEOUT_S} s") from None
        if done.returncode != 0:
            lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
            tail = " / ".join(line.strip() for line in lines[-3:]) or f"exit {done.returncode}"
            raise InstallError(f"{self.package} {version} does not install ({time.monotonic() - start:.0f} s): {tail}")


def _pin_name(pin: str) -> str:
    """The package a requirement line pins (``name==1.0`` -> ``name``; ``-e folder`` -> "")."""
    if pin.startswith("-e "):
        return ""
    for stop in ("==", " @ "):
        pin = pin.split(stop, 1)[0]
    return _normal(pin.strip())


def _public(version: str) -> str:
    """``2.13.0+cpu`` -> ``2.13.0``: ``==`` on the public version also takes a local build such as the CPU wheel."""
    return version.split("+", 1)[0]
