"""`genguard gate`: the project's gate image built and its decoding tests run in it; the exit status is the gate.

The order is the cheapest refusal first: the project and its tests (no tests is an error before docker is asked), the
artifacts folder, the docker daemon, the base (its Python, torch and, with `--gpu`, a GPU given to a container), then
the requirements (cached), the build (`--network none` unless the build may reach the index), the run (`--network
none`, the image's non-root user, folders and a Hugging Face cache mounted read-only), the artifacts copied out
whatever happened, and the verdict read from the JUnit XML.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from pytest_genguard.gate.context import DockerIgnore, write_context
from pytest_genguard.gate.docker import Docker
from pytest_genguard.gate.dockerfile import ARTIFACTS, CONTEXT_DIR, DEFAULT_BASE, JUNIT, REPORT, cpu_command, render
from pytest_genguard.gate.errors import GateError
from pytest_genguard.gate.junit import report_verdict
from pytest_genguard.gate.project import Project, has_tests, load_project, selected_paths
from pytest_genguard.gate.wheelhouse import BaseInfo, genguard_wheel, make_wheelhouse, prune, wheel_requirements

__all__ = ["HF_CACHE_MOUNT", "OUTPUTS", "GateOptions", "cache_dir", "run_gate"]

OUTPUTS = ("junit.xml", "genguard-report.html", "gate-output.txt", "gate-build.txt")
UPDATED = "updated"
"""The folder of the artifacts that a recording run's new snapshot files are copied to (`--snapshot-update`)."""
RECORDING_FLAGS = ("--snapshot-update", "--genguard-update-stale")
SNAPSHOT_FOLDERS = ("__snapshots__", "__genguard_baselines__")
HF_CACHE_MOUNT = "/hf-cache"
CACHE_ENV_VAR = "GENGUARD_CACHE_DIR"


@dataclass(frozen=True)
class GateOptions:
    """`genguard gate`'s arguments."""

    project: Path = Path(".")
    base: str = DEFAULT_BASE
    gpu: bool = False
    artifacts: Path = Path("gate-artifacts")
    extras: tuple[str, ...] = ()
    requirements: tuple[str, ...] = ()
    models: tuple[Path, ...] = ()
    hf_cache: Path | None = None
    pip_index: bool = False
    file: Path | None = None
    pytest_args: tuple[str, ...] = field(default=())


def cache_dir() -> Path:
    """Where the gate keeps its wheelhouses and genguard's wheels: `$GENGUARD_CACHE_DIR/gate`, else the user cache
    dir's (the decision `bisection.environments.cache_root` makes; a test holds the two equal)."""
    configured = os.environ.get(CACHE_ENV_VAR)
    if configured:
        return Path(configured).expanduser() / "gate"
    import platformdirs  # only here: with GENGUARD_CACHE_DIR set, the gate runs without it

    return Path(platformdirs.user_cache_dir("genguard")) / "gate"


def _say(text: str) -> None:
    print(f"genguard gate: {text}", flush=True)


def _writable_artifacts(folder: Path) -> Path:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".genguard-gate-write-test."):
            pass
    except OSError as exc:
        raise GateError(
            f"--artifacts {folder}: not a folder this user can write to ({exc.strerror}): name another"
        ) from None
    for name in OUTPUTS:
        (folder / name).unlink(missing_ok=True)
    shutil.rmtree(folder / UPDATED, ignore_errors=True)
    return folder.resolve()


def _readable_by_all(folder: Path, option: str) -> None:
    """A mounted folder is read by the image's user (UID 10001), not its owner: a file only its owner may read (0600,
    as save_pretrained writes some) would be "no such file" in the container."""
    for path in [folder, *folder.rglob("*")]:
        mode = path.stat().st_mode
        if mode & 0o004 == 0 or (path.is_dir() and mode & 0o001 == 0):
            raise GateError(
                f"{option} {folder}: {path} is not readable by other users (mode {mode & 0o777:o}), and the gate's "
                f"user (UID 10001) is not its owner: chmod -R o+rX {folder}"
            )


def _mounts(options: GateOptions) -> list[str]:
    argv: list[str] = []
    for folder in options.models:
        if not folder.is_dir():
            raise GateError(f"--models {folder}: no such folder (a model folder to mount read-only)")
        _readable_by_all(folder, "--models")
        absolute = folder.resolve()
        argv += ["--volume", f"{absolute}:{absolute}:ro"]
    if options.hf_cache is not None:
        if not options.hf_cache.is_dir():
            raise GateError(
                f"--hf-cache {options.hf_cache}: no such folder (a Hugging Face cache: ~/.cache/huggingface/hub)"
            )
        argv += [
            "--volume",
            f"{options.hf_cache.resolve()}:{HF_CACHE_MOUNT}:ro",
            "--env",
            f"HF_HUB_CACHE={HF_CACHE_MOUNT}",
        ]
    return argv


def _check_python(base: BaseInfo) -> None:
    host = "{}.{}".format(*sys.version_info[:2])
    if base.python != host:
        raise GateError(
            f"the base image {base.image} has Python {base.python} and genguard gate runs on Python {host}: the host's "
            f"pip makes the wheels, so run genguard gate with a Python {base.python} (e.g. actions/setup-python), or "
            "pass --pip-index to let pip inside the build reach the package index"
        )
    if base.machine != platform.machine():
        raise GateError(
            f"the base image {base.image} is {base.machine} and this machine {platform.machine()}: the host's pip "
            "makes the wheels for this machine; pass --pip-index to let pip inside the build reach the package index"
        )


def _link(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _tag(project: Project) -> str:
    name = re.sub(r"[^a-z0-9._-]+", "-", (project.name or project.root.name).lower()).strip("-._") or "project"
    return f"genguard-gate/{name}:latest"


def _build(options: GateOptions, project: Project, base: BaseInfo, artifacts: Path, docker: Docker) -> str:
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="genguard-gate-", dir=cache) as name:
        tmp = Path(name)
        generated = tmp / "context"
        requires: list[str] = []
        if not project.is_genguard:
            wheel = genguard_wheel(cache, generated / "genguard")
            requires = wheel_requirements(wheel)
            _say(f"genguard in the image: {wheel.name}")
        house = make_wheelhouse(project, requires, base, cache, fetch=not options.pip_index)
        prune(cache, keep=[house.folder])
        where = (
            "from the index inside the build" if options.pip_index else "made by the host pip: no network in the build"
        )
        _say(f"test requirements ({project.chosen_by}): {house.pins} pinned, {house.wheels} wheels ({where})")
        for path in sorted(house.folder.rglob("*")):
            if path.is_file():
                _link(path, generated / path.relative_to(house.folder))
        (generated / "wheels").mkdir(parents=True, exist_ok=True)
        if options.file is not None:
            if not options.file.is_file():
                raise GateError(f"--file {options.file}: no such Dockerfile")
            (generated / "Dockerfile").write_text(options.file.read_text(encoding="utf-8"), encoding="utf-8")
        else:
            (generated / "Dockerfile").write_text(render(project), encoding="utf-8")
        context = tmp / "context.tar"
        also = [artifacts] if artifacts.is_relative_to(project.root) else []
        files = write_context(context, project.root, generated, ignore=DockerIgnore.of(project.root), also_ignored=also)
        tag = _tag(project)
        args = {"BASE_IMAGE": base.image, **({} if options.pip_index else {"PIP_NO_INDEX": "1"})}
        _say(f"building {tag} on {base.image} ({files} project paths; its output in {artifacts / 'gate-build.txt'})")
        start = time.monotonic()
        with (artifacts / "gate-build.txt").open("w", encoding="utf-8") as log:
            try:
                docker.build(context, f"{CONTEXT_DIR}/Dockerfile", tag, args, network=options.pip_index, log=log)
            except GateError:
                log.flush()
                lines = (artifacts / "gate-build.txt").read_text(encoding="utf-8").splitlines()
                print("\n".join(lines[-40:]), file=sys.stderr)
                raise
    _say(f"built {tag} in {time.monotonic() - start:.0f} s ({docker.image_size(tag) / 1e9:.2f} GB)")
    return tag


def _copy_recorded(docker: Docker, container: str, target: Path) -> None:
    """The snapshot files a recording run wrote or removed in the container's /workspace, copied to `target` (the
    project's layout) and listed."""
    changed = [
        (kind, path[len("/workspace/") :])
        for kind, path in docker.changes(container)
        if path.startswith("/workspace/") and any(f"/{name}/" in f"/{path}" for name in SNAPSHOT_FOLDERS)
    ]
    deepest = [(k, p) for k, p in changed if not any(o.startswith(p + "/") for _, o in changed)]
    for kind, relative in deepest:
        if kind in "AC":
            (target / relative).parent.mkdir(parents=True, exist_ok=True)
            docker.copy_out(container, f"/workspace/{relative}", target / relative)
    written = [p for k, p in deepest if k in "AC"]
    removed = [p for k, p in deepest if k == "D"]
    _say(f"the run wrote {len(written)} snapshot files, copied to {target}" + "".join(f"\n  {p}" for p in written))
    if removed:
        _say(f"and removed {len(removed)} (remove them in the project too):" + "".join(f"\n  {p}" for p in removed))


def _command(config: dict[str, object], tag: str, options: GateOptions) -> list[str]:
    user = str(config.get("User") or "")
    if user.split(":")[0] in ("", "root", "0"):
        raise GateError(f"{tag} runs as root (USER '{user}'): the gate runs as the image's non-root user (USER 10001)")
    command = [str(arg) for arg in config.get("Cmd") or []]  # type: ignore[attr-defined]
    if not options.gpu:
        try:
            command = cpu_command(command)
        except ValueError as exc:
            raise GateError(f"{tag}: {exc}") from None
    return [*command, *options.pytest_args]


def run_gate(options: GateOptions, docker: Docker | None = None) -> int:
    """Build and run the gate; 0 only when it passed (pytest passed, its JUnit XML names no failure, error or
    unexplained skip, the HTML report written), 1 when it did not."""
    project = load_project(options.project, extras=options.extras, requirement_files=options.requirements)
    if not has_tests(selected_paths(project, options.pytest_args)):
        raise GateError(
            f"{project.root}: no tests found (no test_*.py or *_test.py under "
            f"{', '.join(str(p) for p in selected_paths(project, options.pytest_args))}): name them in "
            "[tool.pytest.ini_options] testpaths, [tool.genguard.gate] args, or after -- (genguard gate -- tests/)"
        )
    artifacts = _writable_artifacts(options.artifacts)
    mounts = _mounts(options)
    docker = docker or Docker()
    _say(f"docker {docker.check_daemon()}; project {project.root}")
    base = docker.probe_base(options.base, gpu=options.gpu)
    _say(f"base {base.image}: Python {base.python}, torch {base.torch}, CUDA {base.cuda or 'not probed (CPU run)'}")
    if not options.pip_index:
        _check_python(base)
    tag = _build(options, project, base, artifacts, docker)
    command = _command(docker.image_config(tag), tag, options)
    device = "gpu" if options.gpu else "cpu"
    container = f"genguard-gate-{os.getpid()}"
    gpus = ["--gpus", "all"] if options.gpu else []
    _say(f"running on the {device.upper()}: {' '.join(command)}")
    start = time.monotonic()
    try:
        with (artifacts / "gate-output.txt").open("w", encoding="utf-8") as out:
            rc = docker.run_container(
                ["--name", container, "--network", "none", *gpus, *mounts, tag, *command], out, sys.stdout
            )
        _say(f"the gate ran for {time.monotonic() - start:.0f} s (pytest exit {rc})")
        if not docker.copy_out(container, f"{ARTIFACTS}/.", artifacts):
            _say(f"the container left no {ARTIFACTS}")
        recording = any(flag in options.pytest_args for flag in RECORDING_FLAGS)
        if recording:
            _copy_recorded(docker, container, artifacts / UPDATED)
    finally:
        docker.remove(container)
    passed = report_verdict(artifacts / Path(JUNIT).name, device, project.root, sys.stdout)
    if not (artifacts / Path(REPORT).name).is_file():
        print("genguard gate: FAILED: the gate wrote no HTML report", flush=True)
        passed = False
    if recording:
        _say(
            "a recording run: its tests wrote snapshots instead of checking them, so this run is no gate; review "
            f"{artifacts / UPDATED} and copy it into the project (cp -r {artifacts / UPDATED}/. .), then commit"
        )
    if rc != 0 or not passed:
        _say(f"FAILED: the gate did not pass (pytest exit {rc}); JUnit XML, HTML report and output in {artifacts}")
        return 1
    _say(f"passed; JUnit XML, HTML report and output in {artifacts}")
    return 0


def print_dockerfile(project_dir: Path, extras: Sequence[str], requirements: Sequence[str], out: IO[str]) -> int:
    """`genguard gate --dockerfile`: the Dockerfile genguard gate builds for the project in `project_dir`."""
    out.write(render(load_project(project_dir, extras=extras, requirement_files=requirements)))
    return 0
