#!/usr/bin/env python3
"""The requirements of pyproject.toml's dependencies and the named extras, one per line (standard library only).

    python3 .ci/pyproject_requirements.py pyproject.toml test,ctranslate2 [--build]

Dockerfile.cuda installs the gate's dependencies from this list in a layer keyed by pyproject.toml alone (the source is
copied after it, so a source change does not reinstall them), and .ci/cuda-gate builds its wheelhouse from the same
list (--build adds build-system.requires: the image's editable install builds in isolation from that wheelhouse). An
extra that names the project itself (``pytest-genguard[smollm2]``) is expanded in place.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

EXTRA = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*\[([^\]]*)\]\s*$")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(pyproject: Path, extras: list[str], build: bool = False) -> list[str]:
    """The project's dependencies, then each extra's (self-references expanded), then its build requirements."""
    data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    project = data["project"]
    optional: dict[str, list[str]] = project.get("optional-dependencies", {})
    name = _canonical(project["name"])
    out: list[str] = []
    seen_extras: set[str] = set()

    def add(requirement: str) -> None:
        match = EXTRA.match(requirement)
        if match and _canonical(match.group(1)) == name:
            for extra in match.group(2).split(","):
                add_extra(extra.strip())
        elif requirement not in out:
            out.append(requirement)

    def add_extra(extra: str) -> None:
        if extra in seen_extras:
            return
        if extra not in optional:
            raise SystemExit(
                f"{pyproject}: no extra {extra!r} in [project.optional-dependencies] (it has: {', '.join(optional)})"
            )
        seen_extras.add(extra)
        for requirement in optional[extra]:
            add(requirement)

    for requirement in project.get("dependencies", []):
        add(requirement)
    for extra in extras:
        add_extra(extra)
    if build:
        for requirement in data.get("build-system", {}).get("requires", []):
            add(requirement)
    return out


def main(argv: list[str]) -> int:
    args = [a for a in argv if a != "--build"]
    if len(args) != 2:
        print(f"usage: {Path(__file__).name} PYPROJECT EXTRA[,EXTRA...] [--build]", file=sys.stderr)
        return 2
    extras = [e.strip() for e in args[1].split(",") if e.strip()]
    print("\n".join(requirements(Path(args[0]), extras, build="--build" in argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
