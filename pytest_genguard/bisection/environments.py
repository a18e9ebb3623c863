"""One virtual environment per probed release, built with uv and kept for the next bisect: a thin layer over the
running environment.

A probe environment holds the probed release of the bisected package alone (``uv pip install --no-deps``), plus
those of its requirements that the running environment does not satisfy. Everything else is the running
environment itself: a ``.pth`` file appends its site-packages after the probe's own, so every other package is the
very install the user has (editable ones, this checkout of pytest-genguard among them, included), at its version,
with its compiled bytecode. That is what makes a probe cheap: nothing but one wheel is linked, and the import of torch
reads the running environment's ``.pyc`` files instead of compiling torch again in every fresh environment (20 s of a
40 s probe on a loaded 2-core machine). The release installed here is probed in this interpreter, with no
environment at all.

uv does not read pip's configuration, and without pip's find-links it would fetch the multi-GB CUDA torch where pip
takes the CPU wheel from local disk: `PackageSources.from_pip()` hands pip's find-links and indexes (``pip config
list``, which includes ``PIP_FIND_LINKS`` and ``PIP_EXTRA_INDEX_URL``) to uv, and ``--find-links`` adds more.

Environments live under ``<genguard cache>/bisect/`` (``$GENGUARD_CACHE_DIR``, else the user cache dir), one folder
per (package, release, sources, python, running environment), marked ready only once the install finished; a file
lock keeps two bisects from building the same one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import site
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import platformdirs
from filelock import FileLock
from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from pytest_genguard.bisection.releases import public_release
from pytest_genguard.core.errors import InstallError
from pytest_genguard.core.files import atomic_write_text

__all__ = [
    "CACHE_ENV_VAR",
    "Environments",
    "InstallError",
    "PackageSources",
    "base_site_dirs",
    "cache_root",
    "find_uv",
    "installed",
    "unsatisfied",
]

CACHE_ENV_VAR = "GENGUARD_CACHE_DIR"
READY = "genguard-bisect-env.json"
LAYER = "_genguard_bisect_base"  # the module (and .pth file) that appends the running environment's site-packages
_INSTALL_TIMEOUT_S = 900


def cache_root() -> Path:
    """`$GENGUARD_CACHE_DIR` (``~`` expanded), else the user cache dir: where genguard keeps what it builds outside
    pytest. The torch side's `hf.cache.default_cache_dir` makes the same decision (this tier may not import it:
    `tests/hf/test_cache.py` holds the two equal)."""
    configured = os.environ.get(CACHE_ENV_VAR)
    return Path(configured).expanduser() if configured else Path(platformdirs.user_cache_dir("genguard"))


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
    no_index: bool = False  # find-links only (pip's --no-index)

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
            no_index=values.get("no-index", "").lower() in ("1", "true", "yes", "on"),
        )

    def uv_args(self) -> list[str]:
        args: list[str] = ["--no-index"] if self.no_index else []
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


def base_site_dirs() -> tuple[str, ...]:
    """The running environment's site-packages folders (and the user site, where Python reads it), in its order."""
    dirs = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    return tuple(dict.fromkeys(str(Path(d).resolve()) for d in dirs if Path(d).is_dir()))


def _distributions(paths: Sequence[str]) -> dict[str, metadata.Distribution]:
    """The distributions on `paths` by normalised name, the first of each name winning (as imports do)."""
    found: dict[str, metadata.Distribution] = {}
    for dist in metadata.distributions(path=list(paths)):
        name = dist.metadata["Name"]
        if name and _normal(name) not in found:
            found[_normal(name)] = dist
    return found


def installed(paths: Sequence[str]) -> dict[str, str]:
    """{normalised name: version} of the distributions on `paths`, the first of each name winning (as imports do)."""
    return {name: dist.version for name, dist in _distributions(paths).items()}


def unsatisfied(requirements: Sequence[str], paths: Sequence[str]) -> list[str]:
    """The requirements (``Requires-Dist`` lines; extras' and other platforms' left out) that the distributions on
    `paths` do not meet, as ``name[extras]<specifier>`` strings for uv. A requirement with extras is met when the
    distribution is and so are the requirements its extras add (``cuda-toolkit[cufile]`` needs nvidia-cufile)."""
    present = _distributions(paths)
    missing: list[str] = []
    seen: set[tuple[str, str]] = set()

    def check(lines: Sequence[str], extra: str) -> None:
        for line in lines:
            try:
                requirement = Requirement(line)
            except InvalidRequirement:
                continue
            if requirement.marker is not None and not requirement.marker.evaluate({"extra": extra}):
                continue
            dist = present.get(_normal(requirement.name))
            if dist is None or not _meets(requirement, dist.version):
                extras = f"[{','.join(sorted(requirement.extras))}]" if requirement.extras else ""
                missing.append(f"{requirement.name}{extras}{requirement.specifier}")
                continue
            for wanted in sorted(requirement.extras):
                if (_normal(requirement.name), wanted) not in seen:
                    seen.add((_normal(requirement.name), wanted))
                    check(dist.requires or [], wanted)

    check(requirements, "")
    return list(dict.fromkeys(missing))


def _meets(requirement: Requirement, version: str) -> bool:
    try:
        return requirement.specifier.contains(Version(version), prereleases=True)
    except InvalidVersion:
        return False


_LAYER_TEMPLATE = '''"""genguard bisect: one release of PACKAGE here, the rest from the running environment."""
import os
import sys

BASE = BASE_DIRS
SKIP = SKIP_PREFIXES


def _append(folder):
    if not os.path.isdir(folder) or folder in sys.path:
        return
    sys.path.append(folder)
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".pth") or name.lower().startswith(SKIP):
            continue
        try:
            with open(os.path.join(folder, name), encoding="utf-8") as pth:
                lines = pth.read().splitlines()
        except OSError:
            continue
        for line in lines:
            if not line.strip() or line.startswith("#"):
                continue
            if line.startswith(("import ", "import\\t")):
                exec(line)
                continue
            path = os.path.join(folder, line.rstrip())
            if os.path.exists(path) and path not in sys.path:
                sys.path.append(path)


for _folder in BASE:
    _append(_folder)
'''


def _layer_module(base: Sequence[str], package: str) -> str:
    """The module a probe environment imports at start-up (from its ``.pth`` file): it appends the running
    environment's site-packages after the probe's own and runs their ``.pth`` files (editable installs, as `site`
    does), except the bisected package's own (an editable install of it would shadow the probed release)."""
    name = _normal(package).replace("-", "_")
    skip = (f"__editable__.{name}-", f"__editable___{name}_", f"{name}.pth", f"{LAYER}.pth")
    return (
        _LAYER_TEMPLATE.replace("PACKAGE", package)
        .replace("BASE_DIRS", repr(list(base)))
        .replace("SKIP_PREFIXES", repr(skip))
    )


@dataclass(frozen=True)
class Environments:
    """Builds (or reuses) the environment of one release of `package`, layered over the running environment (`base`:
    its site-packages); the release installed here needs none (`ensure` returns this interpreter)."""

    package: str
    sources: PackageSources
    root: Path
    python: str = sys.executable
    base: tuple[str, ...] = field(default_factory=base_site_dirs)

    def key(self, version: str) -> str:
        spec = {
            "package": _normal(self.package),
            "version": version,
            "sources": self.sources.uv_args(),
            "python": ".".join(map(str, sys.version_info[:3])),
            "base": list(self.base),
        }
        digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]
        return f"{_normal(self.package)}-{version}-{digest}"

    def python_of(self, version: str) -> Path:
        return self.root / self.key(version) / "bin" / "python"

    def is_home(self, version: str) -> bool:
        """Whether `version` is the release installed in the running environment (compared by public version)."""
        here = installed(self.base).get(_normal(self.package))
        return here is not None and public_release(here) == public_release(version)

    def ensure(self, version: str) -> tuple[Path, bool]:
        """The python that runs `version`, and whether it was there already (this interpreter for the release
        installed here, else the release's environment); InstallError when uv cannot build it."""
        if self.is_home(version):
            return Path(self.python), True
        folder = self.root / self.key(version)
        self.root.mkdir(parents=True, exist_ok=True)
        with FileLock(str(folder) + ".lock"):
            if (folder / READY).exists() and not self._missing(folder):
                return folder / "bin" / "python", True
            if folder.exists():
                shutil.rmtree(folder)  # a build that did not finish, or one the running environment has outgrown
            try:
                self._build(folder, version)
            except InstallError:
                shutil.rmtree(folder, ignore_errors=True)
                raise
            atomic_write_text(folder / READY, json.dumps({"package": self.package, "version": version}) + "\n")
        return folder / "bin" / "python", False

    def _site(self, folder: Path) -> Path:
        found = sorted(folder.glob("lib/python*/site-packages")) or sorted(folder.glob("Lib/site-packages"))
        if not found:
            raise InstallError(f"{self.package}: no site-packages in {folder}")
        return found[0]

    def _requirements(self, folder: Path) -> list[str]:
        """The probed release's ``Requires-Dist`` lines (read from its installed metadata)."""
        for dist in metadata.distributions(path=[str(self._site(folder))]):
            if _normal(dist.metadata["Name"] or "") == _normal(self.package):
                return list(dist.requires or [])
        raise InstallError(f"{self.package}: not installed in {folder}")

    def _missing(self, folder: Path) -> list[str]:
        """The probed release's requirements that neither its environment nor the running one meets."""
        try:
            return unsatisfied(self._requirements(folder), [str(self._site(folder)), *self.base])
        except InstallError:
            return [self.package]

    def _build(self, folder: Path, version: str) -> None:
        uv = find_uv()
        env = dict(os.environ)
        env.pop("VIRTUAL_ENV", None)
        self._uv([uv, "venv", "--quiet", "--python", self.python, str(folder)], env, version)
        python = str(folder / "bin" / "python")
        install = [uv, "pip", "install", "--quiet", "--python", python]
        requirement = f"{self.package}=={public_release(version)}"
        self._uv([*install, "--no-deps", requirement, *self.sources.uv_args()], env, version)
        missing = self._missing(folder)
        if missing:  # requirements this release has and the running environment does not meet: into the layer
            constraints = folder / "genguard-constraints.txt"
            skip = {_normal(Requirement(m).name) for m in missing} | {_normal(self.package)}
            pins = [f"{name}=={v}" for name, v in sorted(installed(self.base).items()) if name not in skip]
            constraints.write_text("\n".join(pins) + "\n", encoding="utf-8")
            try:  # the running environment's versions where they fit, whatever uv picks where they do not
                self._uv([*install, *missing, "--constraint", str(constraints), *self.sources.uv_args()], env, version)
            except InstallError:
                self._uv([*install, *missing, *self.sources.uv_args()], env, version)
            still = self._missing(folder)
            if still:
                raise InstallError(f"{self.package} {version} does not install: it needs {', '.join(still)}")
        site_dir = self._site(folder)
        (site_dir / f"{LAYER}.py").write_text(_layer_module(self.base, self.package), encoding="utf-8")
        (site_dir / f"{LAYER}.pth").write_text(f"import {LAYER}\n", encoding="utf-8")

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
