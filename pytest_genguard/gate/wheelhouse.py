"""What the image installs, made on the host: the project's test requirements resolved and pinned by the host's pip
(for the base's Python, against the base's torch), their wheels (so the build needs no network) and a wheel of the
genguard that runs the command (genguard is not on the package index).

The resolution is `pip install --dry-run --ignore-installed --report`: pip reads the packages' metadata, downloading
no wheel it does not keep. torch is the base's (constrained to its version) and so is what torch alone needs: the
walk from what was asked for stops at torch, so a CUDA build's nvidia-* wheels are never fetched; a wheel the base
already has at that version is not fetched either. Everything is cached by what declares it (the declaration files,
the base's Python, platform, torch and packages, genguard's own requirements): the dependency layer is keyed by those
alone, and a warm run calls no pip.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from pytest_genguard.gate.errors import GateError
from pytest_genguard.gate.project import GENGUARD, Project, canonical, requirement_name

__all__ = [
    "BaseInfo",
    "Wheelhouse",
    "genguard_wheel",
    "kept_items",
    "make_wheelhouse",
    "prune",
    "repacked_wheel",
    "wheel_requirements",
]

_ZIP_TIME = (1980, 1, 1, 0, 0, 0)
_NOT_REPACKED = {"INSTALLER", "REQUESTED", "direct_url.json", "RECORD"}
_PIP_TIMEOUT_S = 1800
_KEEP_UNUSED_S = 7 * 24 * 3600
_SOURCE_FILES = ("pyproject.toml", "README.md", "LICENSE", "LICENSE.txt", "MANIFEST.in", "setup.py", "setup.cfg")


@dataclass(frozen=True)
class BaseInfo:
    """What the base image holds, as its own Python reports it."""

    image: str
    python: str
    machine: str
    torch: str | None
    cuda: str | None
    distributions: tuple[tuple[str, str], ...]
    """(canonical name, version) of every installed distribution."""

    @property
    def torch_public(self) -> str:
        """torch's version without its local label (2.13.0+cpu -> 2.13.0): what an index can satisfy."""
        return (self.torch or "").split("+")[0]


@dataclass(frozen=True)
class Wheelhouse:
    folder: Path
    """requirements.txt (the pins), no-deps.txt, wheels/."""
    pins: int
    wheels: int


def _run_pip(argv: Sequence[str], what: str, cwd: Path | None = None) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=_PIP_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        lines = [line for line in (done.stdout + done.stderr).splitlines() if not line.startswith("WARNING: Location")]
        raise GateError(f"{what}: pip failed (exit {done.returncode}):\n  " + "\n  ".join(lines[-25:]))


def _digest(parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def _source_root() -> Path | None:
    """The source checkout the running genguard is imported from (an editable install or PYTHONPATH), if any."""
    root = Path(__file__).resolve().parents[2]  # the folder above the package this module belongs to
    pyproject = root / "pyproject.toml"
    if pyproject.is_file() and re.search(r'^name\s*=\s*"pytest-genguard"', pyproject.read_text("utf-8"), re.M):
        return root
    return None


def _source_wheel(root: Path, cache: Path) -> Path:
    """A wheel built by pip from the checkout's package files (copied first: pip builds in the tree it is given)."""
    files = [root / name for name in _SOURCE_FILES if (root / name).is_file()]
    files += sorted(p for p in (root / "pytest_genguard").rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    key = _digest([(str(p.relative_to(root)), hashlib.sha256(p.read_bytes()).hexdigest()) for p in files])[:16]
    folder = cache / f"genguard-{key}"
    with FileLock(str(folder) + ".lock"):
        built = sorted(folder.glob("*.whl"))
        if built:
            folder.touch()
            return built[0]
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            source = Path(tmp) / "source"
            for path in files:
                (source / path.relative_to(root)).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, source / path.relative_to(root))
            _run_pip(["wheel", "--quiet", "--no-deps", "--wheel-dir", str(Path(tmp) / "out"), str(source)], "genguard")
            (Path(tmp) / "out").rename(folder)
        return sorted(folder.glob("*.whl"))[0]


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def repacked_wheel(dist: metadata.Distribution, out: Path) -> Path:
    """An installed distribution's files, as its wheel put them (checked against its RECORD), packed into a wheel
    again (pure Python: `py3-none-any`); the scripts pip wrote and pip's own records left out."""
    entries = [f for f in dist.files or [] if not f.parts[0].startswith("..") and "__pycache__" not in f.parts]
    info_dir = next((f.parts[0] for f in entries if f.parts[0].endswith(".dist-info")), None)
    if info_dir is None:
        raise GateError(f"the installed {dist.metadata['Name']} has no dist-info listing its files: reinstall it")
    out.mkdir(parents=True, exist_ok=True)
    wheel = out / f"{info_dir.removesuffix('.dist-info')}-py3-none-any.whl"
    record: list[tuple[str, str, str]] = []
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for entry in sorted(entries, key=lambda f: (f.parts[0] == info_dir, str(f))):
            if entry.parts[0] == info_dir and entry.name in _NOT_REPACKED:
                continue
            data = Path(str(entry.locate())).read_bytes()
            if entry.hash is not None and _record_hash(data) != f"{entry.hash.mode}={entry.hash.value}":
                raise GateError(
                    f"{entry.locate()}: the installed file differs from what {dist.metadata['Name']}'s wheel installed "
                    "(its RECORD): reinstall it (pip install --force-reinstall --no-deps ...)"
                )
            zf.writestr(zipfile.ZipInfo(str(entry), _ZIP_TIME), data)
            record.append((str(entry), _record_hash(data), str(len(data))))
        text = io.StringIO()
        csv.writer(text, lineterminator="\n").writerows([*record, (f"{info_dir}/RECORD", "", "")])
        zf.writestr(zipfile.ZipInfo(f"{info_dir}/RECORD", _ZIP_TIME), text.getvalue())
    return wheel


def genguard_wheel(cache: Path, out: Path) -> Path:
    """A wheel of the genguard that runs this command, in `out`: built by pip from its checkout when it runs from one
    (an editable install), else repacked from the installed distribution's files."""
    out.mkdir(parents=True, exist_ok=True)
    root = _source_root()
    if root is not None:
        built = _source_wheel(root, cache)
        return Path(shutil.copy2(built, out / built.name))
    return repacked_wheel(metadata.distribution(GENGUARD), out)


def wheel_requirements(wheel: Path) -> list[str]:
    """The requirements a wheel's METADATA declares for every install (no extra)."""
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        text = zf.read(name).decode("utf-8")
    found = [line[len("Requires-Dist:") :].strip() for line in text.splitlines() if line.startswith("Requires-Dist:")]
    return [r for r in found if "extra ==" not in r.replace('"', "'").replace("extra==", "extra ==")]


def _resolve(project: Project, extra: Sequence[str], base: BaseInfo, tmp: Path) -> list[dict[str, Any]]:
    """pip's installation report for the project's requirements (metadata only), torch constrained to the base's."""
    requested = [r for r in [*project.requirements, *extra, *project.build_requirements] if requirement_name(r)]
    requested = [r for r in requested if requirement_name(r) not in {GENGUARD, project.name}]
    (tmp / "requirements.in").write_text("\n".join(requested) + "\n", encoding="utf-8")
    (tmp / "constraints.txt").write_text(f"torch=={base.torch_public}\n", encoding="utf-8")
    argv = ["install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(tmp / "report.json")]
    argv += ["--constraint", str(tmp / "constraints.txt"), "--requirement", str(tmp / "requirements.in")]
    for name in project.requirement_files:
        argv += ["--requirement", str(project.root / name)]
    _run_pip(
        argv, f"resolving {project.name or project.root.name}'s test requirements ({project.chosen_by})", project.root
    )
    report = json.loads((tmp / "report.json").read_text(encoding="utf-8"))
    items: list[dict[str, Any]] = report["install"]
    return items


def kept_items(items: list[dict[str, Any]], project: Project) -> list[dict[str, Any]]:
    """The items reachable from what was asked for without passing through torch (torch and what only it needs are
    the base's), less the project and genguard."""
    by_name = {canonical(str(item["metadata"]["name"])): item for item in items}
    skip = {"torch", GENGUARD, project.name}
    pending = [name for name, item in by_name.items() if item.get("requested") and name not in skip]
    reached: set[str] = set()
    while pending:
        name = pending.pop()
        if name in reached or name in skip or name not in by_name:
            continue
        reached.add(name)
        requires = by_name[name]["metadata"].get("requires_dist", [])
        pending += [requirement_name(r) for r in requires]
    return [by_name[name] for name in sorted(reached)]


def make_wheelhouse(
    project: Project, genguard_requires: Sequence[str], base: BaseInfo, cache: Path, *, fetch: bool
) -> Wheelhouse:
    """The pinned requirements and (when `fetch`) their wheels for `project` on `base`, cached by what declares them."""
    declared = [(str(p.relative_to(project.root)), p.read_text(encoding="utf-8")) for p in project.declaration_files()]
    key = _digest(
        {
            "recipe": 1,
            "declared": declared,
            "requirements": project.requirements,
            "files": project.requirement_files,
            "no_deps": project.no_deps,
            "genguard": sorted(genguard_requires),
            "base": [base.python, base.machine, base.torch, base.distributions],
            "fetch": fetch,
        }
    )[:16]
    folder = cache / f"wheelhouse-{key}"
    cache.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder) + ".lock"):
        if not (folder / "requirements.txt").is_file():
            with tempfile.TemporaryDirectory(dir=cache) as name:
                tmp = Path(name)
                kept = kept_items(_resolve(project, genguard_requires, base, tmp), project)
                pins = [f"{item['metadata']['name']}=={item['metadata']['version']}" for item in kept]
                house = tmp / "house"
                (house / "wheels").mkdir(parents=True)
                (house / "no-deps.txt").write_text("".join(f"{r}\n" for r in project.no_deps), encoding="utf-8")
                if fetch:
                    in_base = set(base.distributions)
                    build = {requirement_name(r) for r in project.build_requirements}
                    wanted = [
                        pin
                        for pin, item in zip(pins, kept, strict=True)
                        if (canonical(str(item["metadata"]["name"])), str(item["metadata"]["version"])) not in in_base
                        or requirement_name(pin) in build
                    ]
                    for batch, what in ((wanted, "the wheels of the test requirements"), (project.no_deps, "no-deps")):
                        if batch:
                            argv = ["wheel", "--quiet", "--no-deps", "--wheel-dir", str(house / "wheels"), *batch]
                            _run_pip(argv, f"fetching {what}", project.root)
                (house / "requirements.txt").write_text("".join(f"{p}\n" for p in pins), encoding="utf-8")
                house.rename(folder)
        folder.touch()
    return Wheelhouse(
        folder, pins=len(read_lines(folder / "requirements.txt")), wheels=len(list(folder.glob("wheels/*")))
    )


def prune(cache: Path, keep: Sequence[Path]) -> None:
    """Wheelhouses and genguard wheels unused for a week removed (each run touches what it uses), unless a run holds
    one's lock."""
    now = time.time()
    for folder in [*cache.glob("wheelhouse-*"), *cache.glob("genguard-*")]:
        if folder in keep or not folder.is_dir() or now - folder.stat().st_mtime < _KEEP_UNUSED_S:
            continue
        try:
            with FileLock(str(folder) + ".lock", timeout=0):
                shutil.rmtree(folder, ignore_errors=True)
        except Timeout:
            continue


def read_lines(path: Path) -> list[str]:
    return [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
