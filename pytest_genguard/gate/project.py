"""The project `genguard gate` builds: where its dependencies are declared and which of them the gate installs, what
makes up its installable package, and which tests the image runs.

The test requirements are chosen in this order, the first that says anything winning (docs/gpu.md):

1. the command line: `--extras a,b` and `--requirements FILE` (either or both);
2. `[tool.genguard.gate]` in pyproject.toml: `extras = [...]`, `requirements = [...]`;
3. pyproject.toml's first extra named `test`, `tests` or `testing`;
4. the first requirements file of `REQUIREMENT_FILES` in the project's root;
5. nothing besides the project's own dependencies.

The project's `[project] dependencies` always come with them (an extra that names the project itself is expanded in
place), and so do the build requirements, which pip needs as wheels to install the project inside the build.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_genguard.gate.errors import GateError

__all__ = [
    "GENGUARD",
    "REQUIREMENT_FILES",
    "TEST_EXTRAS",
    "Project",
    "canonical",
    "has_tests",
    "load_project",
    "pyproject_requirements",
    "requirement_name",
    "selected_paths",
]

GENGUARD = "pytest-genguard"
TEST_EXTRAS = ("test", "tests", "testing")
REQUIREMENT_FILES = ("requirements-test.txt", "requirements-tests.txt", "test-requirements.txt", "requirements-dev.txt")
_SELF_EXTRA = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*\[([^\]]*)\]\s*$")
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_INCLUDE = re.compile(r"^\s*(?:-r|--requirement|-c|--constraint)(?:\s+|=)(\S+)")
_CONFIG_KEYS = {"extras", "requirements", "no-deps", "args", "install", "prepare"}


def canonical(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    """The canonical distribution name a requirement string starts with ("" when it names none)."""
    found = _NAME.match(requirement)
    return canonical(found.group(1)) if found else ""


@dataclass(frozen=True)
class Project:
    """A project as the gate sees it (paths relative to `root`)."""

    root: Path
    name: str
    """The canonical distribution name ("" for a folder of tests without a `[project]` table)."""
    installable: bool
    """pyproject.toml has a `[project]` table: the image installs the project (`pip install --no-deps -e .`)."""
    requirements: tuple[str, ...]
    """Requirement strings from pyproject.toml (dependencies, the chosen extras, the build requirements)."""
    requirement_files: tuple[str, ...]
    """Requirements files passed to pip as they are (`-r FILE`), relative to `root`."""
    build_requirements: tuple[str, ...]
    chosen_by: str
    """How the test requirements were chosen, for the gate's first lines."""
    no_deps: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    """The selection: pytest arguments before the gate's own (empty: pytest's testpaths, or the root)."""
    install: tuple[str, ...] = (".",)
    """What the installable package is made of: copied and installed before the rest (`.`: everything at once)."""
    prepare: str = ""
    """A command run as the gate's user after the install, in a layer keyed by `install` (e.g. converting a model)."""
    testpaths: tuple[str, ...] = field(default=())

    @property
    def is_genguard(self) -> bool:
        """The project is pytest-genguard itself: its own source is the genguard the image gets."""
        return self.name == GENGUARD

    def declaration_files(self) -> list[Path]:
        """The files that declare the dependencies (the dependency layer's key), `-r`/`-c` includes followed."""
        found: list[Path] = []
        pending = [self.root / "pyproject.toml"] + [self.root / f for f in self.requirement_files]
        while pending:
            path = pending.pop(0)
            if path in found or not path.is_file():
                continue
            found.append(path)
            if path.name != "pyproject.toml":
                for line in path.read_text(encoding="utf-8").splitlines():
                    if include := _INCLUDE.match(line):
                        pending.append(path.parent / include.group(1))
        return found


def _read_pyproject(root: Path) -> dict[str, Any]:
    path = root / "pyproject.toml"
    if not path.is_file():
        return {}
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise GateError(f"{path}: not valid TOML ({exc}): fix the file") from None


def _strings(config: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = config.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise GateError(f"{where}: {key} must be a list of strings, not {value!r}")
    return tuple(value)


def pyproject_requirements(data: dict[str, Any], extras: Sequence[str], where: str) -> list[str]:
    """The project's dependencies, then each extra's (an extra naming the project itself expanded in place)."""
    project = data.get("project", {})
    if "dependencies" in project.get("dynamic", []) or "optional-dependencies" in project.get("dynamic", []):
        raise GateError(
            f"{where}: the dependencies are dynamic (set by the build backend): declare them in [project], or name a "
            "requirements file with --requirements FILE"
        )
    optional: dict[str, list[str]] = project.get("optional-dependencies", {})
    name = canonical(project.get("name", ""))
    out: list[str] = []
    seen: set[str] = set()

    def add(requirement: str) -> None:
        found = _SELF_EXTRA.match(requirement)
        if found and name and canonical(found.group(1)) == name:
            for extra in found.group(2).split(","):
                add_extra(extra.strip())
        elif requirement not in out:
            out.append(requirement)

    def add_extra(extra: str) -> None:
        if extra in seen:
            return
        if extra not in optional:
            raise GateError(
                f"{where}: no extra {extra!r} in [project.optional-dependencies] (it has: "
                f"{', '.join(optional) or 'none'}): name one of them with --extras"
            )
        seen.add(extra)
        for requirement in optional[extra]:
            add(requirement)

    for requirement in project.get("dependencies", []):
        add(requirement)
    for extra in extras:
        add_extra(extra)
    return out


def _testpaths(data: dict[str, Any], root: Path) -> tuple[str, ...]:
    """pytest's `testpaths` from pyproject.toml or pytest.ini (the files the image's pytest reads too)."""
    ini = data.get("tool", {}).get("pytest", {}).get("ini_options", {})
    if "testpaths" in ini:
        value = ini["testpaths"]
        return tuple(value.split() if isinstance(value, str) else value)
    pytest_ini = root / "pytest.ini"
    if pytest_ini.is_file():
        import configparser

        parser = configparser.ConfigParser()
        parser.read(pytest_ini, encoding="utf-8")
        if parser.has_option("pytest", "testpaths"):
            return tuple(parser.get("pytest", "testpaths").split())
    return ()


def load_project(root: Path, *, extras: Sequence[str] = (), requirement_files: Sequence[str] = ()) -> Project:
    """The project in `root`, its test requirements chosen as the module says."""
    if not root.is_dir():
        raise GateError(f"{root}: no such folder: run genguard gate in the project's root, or pass --project DIR")
    data = _read_pyproject(root)
    where = str(root / "pyproject.toml")
    config = data.get("tool", {}).get("genguard", {}).get("gate", {})
    if not isinstance(config, dict):
        raise GateError(f"{where}: [tool.genguard.gate] must be a table")
    unknown = set(config) - _CONFIG_KEYS
    if unknown:
        raise GateError(
            f"{where}: [tool.genguard.gate] has no key {', '.join(sorted(unknown))} (it takes "
            f"{', '.join(sorted(_CONFIG_KEYS))})"
        )
    where_config = f"{where} [tool.genguard.gate]"
    project = data.get("project", {})
    optional = project.get("optional-dependencies", {})
    if extras or requirement_files:
        chosen, files, how = list(extras), list(requirement_files), "the command line"
    elif config.get("extras") or config.get("requirements"):
        chosen = list(_strings(config, "extras", where_config))
        files = list(_strings(config, "requirements", where_config))
        how = "[tool.genguard.gate]"
    elif found := next((e for e in TEST_EXTRAS if e in optional), None):
        chosen, files, how = [found], [], f"pyproject.toml's extra {found!r}"
    elif found := next((f for f in REQUIREMENT_FILES if (root / f).is_file()), None):
        chosen, files, how = [], [found], found
    else:
        chosen, files, how = [], [], "none: the project's dependencies alone"
    for name in files:
        if not (root / name).is_file():
            raise GateError(f"{root / name}: no such requirements file (named by {how})")
    prepare = config.get("prepare", "")
    if not isinstance(prepare, str):
        raise GateError(f"{where_config}: prepare must be a string (a shell command)")
    install = _strings(config, "install", where_config) or (".",)
    for path in install:
        if path != "." and not (root / path).exists():
            raise GateError(f"{where_config}: install names {path!r}, which is not in {root}")
    requirements = pyproject_requirements(data, chosen, where) if project else []
    if chosen and not project:
        raise GateError(f"{root}: --extras needs a pyproject.toml with a [project] table")
    build = tuple(data.get("build-system", {}).get("requires", [])) if project else ()
    return Project(
        root=root.resolve(),
        name=canonical(project.get("name", "")),
        installable=bool(project),
        requirements=tuple(requirements),
        requirement_files=tuple(files),
        build_requirements=build,
        chosen_by=how,
        no_deps=_strings(config, "no-deps", where_config),
        args=_strings(config, "args", where_config),
        install=install,
        prepare=prepare,
        testpaths=_testpaths(data, root),
    )


def selected_paths(project: Project, extra_args: Sequence[str] = ()) -> list[Path]:
    """The test paths the image's pytest is given: the paths among the selection's arguments (an `@file` read as
    pytest reads it, one argument a line), else pytest's `testpaths`, else the root."""
    args: list[str] = []
    for arg in [*project.args, *extra_args]:
        if arg.startswith("@") and (project.root / arg[1:]).is_file():
            args += (project.root / arg[1:]).read_text(encoding="utf-8").splitlines()
        else:
            args.append(arg)
    paths = [project.root / a.split("::")[0] for a in args if not a.startswith("-")]
    paths = [p for p in paths if p.exists()]
    if paths:
        return paths
    return [project.root / p for p in project.testpaths] or [project.root]


def has_tests(paths: Sequence[Path]) -> bool:
    """Whether any of `paths` is or holds a test file as pytest finds them by default (test_*.py, *_test.py)."""
    for path in paths:
        if path.is_file():
            return True
        for found in path.rglob("*.py"):
            parts = found.relative_to(path).parts
            if any(p.startswith(".") or p in ("node_modules", "__pycache__") for p in parts):
                continue
            if found.name.startswith("test_") or found.name.endswith("_test.py"):
                return True
    return False
