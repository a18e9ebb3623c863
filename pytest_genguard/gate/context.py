"""The build context genguard gate sends to docker: the project's files less what its `.dockerignore` leaves out (and
less `.git`, always) under `project/`, and the gate's own folder beside it (`genguard-gate/`: the Dockerfile, the
pinned requirements, the wheels, genguard's wheel), written as one tar stream so that nothing is written into the
project, and the image's `COPY project/ /workspace/` takes the project alone.

`.dockerignore` is read as docker reads it (moby's patternmatcher): `*` and `?` within one path segment, `**` across
any number of them, a pattern that matches a folder matches everything under it, `!` re-includes, the last matching
pattern wins; patterns are cleaned and a leading `/` dropped.
"""

from __future__ import annotations

import os
import posixpath
import re
import tarfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from pytest_genguard.gate.dockerfile import CONTEXT_DIR, PROJECT_DIR

__all__ = ["ALWAYS_LEFT_OUT", "DockerIgnore", "context_files", "write_context"]

_SPECIAL = set(".+()|{}$^")
ALWAYS_LEFT_OUT = (".git",)
"""Never sent, whatever .dockerignore says: the repository (a checkout may hold a CI token in .git/config, and the
image needs no history)."""


def _regex(pattern: str) -> re.Pattern[str]:
    """A cleaned .dockerignore pattern as a regular expression over a slash-separated relative path."""
    out = "^"
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        i += 1
        if ch == "*":
            if i < len(pattern) and pattern[i] == "*":
                i += 1
                if i < len(pattern) and pattern[i] == "/":
                    i += 1
                out += ".*" if i >= len(pattern) else "(.*/)?"
            else:
                out += "[^/]*"
        elif ch == "?":
            out += "[^/]"
        elif ch == "\\" and i < len(pattern):
            out += re.escape(pattern[i])
            i += 1
        elif ch in _SPECIAL:
            out += "\\" + ch
        else:
            out += ch
    return re.compile(out + "$")


@dataclass(frozen=True)
class _Pattern:
    regex: re.Pattern[str]
    exclusion: bool


class DockerIgnore:
    """The patterns of a `.dockerignore` and whether a path is left out of the context."""

    def __init__(self, lines: Sequence[str]) -> None:
        self.patterns: list[_Pattern] = []
        for raw in lines:
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            exclusion = line.startswith("!")
            line = line[1:].strip() if exclusion else line
            cleaned = posixpath.normpath(line).lstrip("/") or "."
            self.patterns.append(_Pattern(_regex(cleaned), exclusion))

    @classmethod
    def of(cls, root: Path) -> DockerIgnore:
        path = root / ".dockerignore"
        return cls(path.read_text(encoding="utf-8").splitlines() if path.is_file() else [])

    @property
    def has_exceptions(self) -> bool:
        return any(p.exclusion for p in self.patterns)

    def ignored(self, relative: str) -> bool:
        """Whether the slash-separated `relative` path is left out (docker's MatchesOrParentMatches)."""
        parts = relative.split("/")
        candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        matched = False
        for pattern in self.patterns:
            if pattern.exclusion != matched:
                continue
            if any(pattern.regex.match(c) for c in candidates):
                matched = not pattern.exclusion
        return matched


def context_files(root: Path, ignore: DockerIgnore, also_ignored: Sequence[Path] = ()) -> Iterator[str]:
    """The project's paths (relative, slash-separated, folders too) that go into the context, sorted."""
    skip = {p.resolve() for p in also_ignored} | {(root / name).resolve() for name in ALWAYS_LEFT_OUT}
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        dirs.sort()
        kept_dirs = []
        for name in dirs:
            path = here / name
            relative = path.relative_to(root).as_posix()
            if path.resolve() in skip:
                continue
            if ignore.ignored(relative):
                if ignore.has_exceptions and not path.is_symlink():
                    kept_dirs.append(name)  # an exception may bring back something below it
                continue
            yield relative
            if not path.is_symlink():
                kept_dirs.append(name)
        dirs[:] = kept_dirs
        for name in sorted(files):
            relative = (here / name).relative_to(root).as_posix()
            if not ignore.ignored(relative) and (here / name).resolve() not in skip:
                yield relative


def _normalized(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def write_context(
    out: Path, root: Path, generated: Path, *, ignore: DockerIgnore, also_ignored: Sequence[Path] = ()
) -> int:
    """Write the build context to the tar file `out`: the project's files as `project/`, then the folder `generated`
    as `genguard-gate/` (its times zeroed: the same wheels give the same layer). Returns the number of project paths."""
    count = 0
    with tarfile.open(out, "w", format=tarfile.GNU_FORMAT) as tar:
        tar.add(root, arcname=PROJECT_DIR, recursive=False, filter=_normalized)
        for relative in context_files(root, ignore, also_ignored):
            tar.add(root / relative, arcname=f"{PROJECT_DIR}/{relative}", recursive=False, filter=_normalized)
            count += 1
        for path in sorted(generated.rglob("*")):
            info = tar.gettarinfo(path, arcname=f"{CONTEXT_DIR}/{path.relative_to(generated).as_posix()}")
            info.mtime = 0
            _normalized(info)
            if info.isfile():
                with path.open("rb") as fh:
                    tar.addfile(info, fh)
            else:
                tar.addfile(info)
    return count
