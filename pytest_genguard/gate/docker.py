"""The docker client as the gate uses it: whether a daemon answers, what the base image holds (its Python, platform,
torch and packages, asked of the base itself), whether it can be given a GPU, the build and the run. Every way one can
fail is a `GateError` that names the fix.

The classic builder (`DOCKER_BUILDKIT=0`) builds from a tar context on standard input: BuildKit needs the buildx
plugin, and its `# syntax=` frontends an image registry, neither of which a machine without a registry has.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

from pytest_genguard.gate.errors import GateError
from pytest_genguard.gate.wheelhouse import BaseInfo

__all__ = ["Docker", "base_probe_script"]

_QUICK_S = 120
_PROBE_S = 900  # a first use of the default base pulls it
_ENV = {"DOCKER_BUILDKIT": "0", "DOCKER_CLI_HINTS": "false"}
NO_GPU_FIX = (
    "give docker the GPU (install the NVIDIA driver and the NVIDIA Container Toolkit, then "
    "`nvidia-ctk runtime configure --runtime=docker` and restart docker; `docker run --rm --gpus all BASE nvidia-smi` "
    "must work), or run the gate on the CPU: genguard gate without --gpu"
)

_PROBE = """
import importlib.metadata as m, json, platform, re, sys
info = {"python": "%d.%d" % sys.version_info[:2], "machine": platform.machine(), "system": platform.system()}
info["distributions"] = sorted({(re.sub(r"[-_.]+", "-", d.metadata["Name"]).lower(), d.version)
                                for d in m.distributions() if d.metadata["Name"]})
try:
    info["torch"] = m.version("torch")
except m.PackageNotFoundError:
    info["torch"] = None
if info["torch"] and sys.argv[1:] == ["gpu"]:
    import torch
    info["cuda"] = torch.version.cuda
    info["cuda_available"] = torch.cuda.is_available()
    info["devices"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
print("GENGUARD-BASE " + json.dumps(info))
"""


def base_probe_script() -> str:
    """The Python the base runs to say what it holds (one JSON line, prefixed)."""
    return _PROBE


class Docker:
    """The docker command line, in the environment the gate needs (DOCKER_HOST and the rest as the caller has it)."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.env = {**(env if env is not None else os.environ), **_ENV}
        self.exe = shutil.which("docker", path=self.env.get("PATH"))

    def _run(
        self, argv: Sequence[str], timeout: float = _QUICK_S, **kwargs: object
    ) -> subprocess.CompletedProcess[str]:
        assert self.exe is not None
        return subprocess.run(  # type: ignore[call-overload, no-any-return]
            [self.exe, *argv], env=self.env, capture_output=True, text=True, timeout=timeout, check=False, **kwargs
        )

    def check_daemon(self) -> str:
        """The daemon's version; a GateError naming the fix when there is no docker or no daemon answers."""
        if self.exe is None:
            raise GateError(
                "docker is not on PATH: install Docker Engine (https://docs.docker.com/engine/install/; on Debian or "
                "Ubuntu: apt-get install docker.io) and run genguard gate again"
            )
        done = self._run(["version", "--format", "{{.Server.Version}}"])
        if done.returncode != 0:
            where = self.env.get("DOCKER_HOST", "the default socket, unix:///var/run/docker.sock")
            reason = (done.stderr.strip().splitlines() or ["no answer"])[-1]
            raise GateError(
                f"no docker daemon answers at {where} ({reason}): start it (sudo systemctl start docker), or point "
                "DOCKER_HOST at one; a user outside the docker group needs sudo or that group"
            )
        return done.stdout.strip()

    def probe_base(self, image: str, *, gpu: bool) -> BaseInfo:
        """What `image` holds; with `gpu`, asked in a container given the GPUs (`--gpus all`), so a daemon or a base
        that cannot use one is found before anything is built."""
        gpus = ["--gpus", "all"] if gpu else []
        argv = ["run", "--rm", "--network", "none", *gpus, "--entrypoint", "python", image, "-c", _PROBE]
        done = self._run([*argv, *(["gpu"] if gpu else [])], timeout=_PROBE_S)
        line = next((ln for ln in done.stdout.splitlines() if ln.startswith("GENGUARD-BASE ")), None)
        if done.returncode != 0 or line is None:
            reason = " ".join((done.stderr.strip().splitlines() or ["no output"])[-3:])
            if gpu and ("capabilities: [[gpu]]" in reason or "nvidia" in reason.lower()):
                raise GateError(f"--gpu: docker cannot give a container a GPU here ({reason}): {NO_GPU_FIX}")
            if "executable file not found" in reason or 'exec: "python"' in reason:
                raise GateError(f"the base image {image} has no `python` on PATH ({reason}): {_BASE_FIX}")
            raise GateError(
                f"could not run the base image {image} ({reason}): pull it (docker pull {image}), or pass --base a "
                f"local image; {_BASE_FIX}"
            )
        info = json.loads(line.split(" ", 1)[1])
        if info["torch"] is None:
            raise GateError(
                f"the base image {image} has no torch installed (its Python is {info['python']}): {_BASE_FIX}"
            )
        if gpu and not info.get("cuda"):
            raise GateError(
                f"--gpu: the base image {image} has a CPU-only torch ({info['torch']}, torch.version.cuda None): pass "
                "--base an image with a CUDA build of torch (the default, pytorch/pytorch:...-cuda...)"
            )
        if gpu and not info.get("cuda_available"):
            raise GateError(
                f"--gpu: torch {info['torch']} (CUDA {info['cuda']}) in {image} sees no usable GPU under "
                f"`docker run --gpus all` (a driver too old for CUDA {info['cuda']}?): {NO_GPU_FIX}"
            )
        return BaseInfo(
            image=image,
            python=info["python"],
            machine=info["machine"],
            torch=info["torch"],
            cuda=info.get("cuda"),
            distributions=tuple((name, version) for name, version in info["distributions"]),
        )

    def build(
        self, context: Path, dockerfile: str, tag: str, build_args: Mapping[str, str], *, network: bool, log: IO[str]
    ) -> None:
        """`docker build` from the tar `context` (the classic builder), its output to `log`."""
        argv = ["build", "--force-rm", "--file", dockerfile, "--tag", tag]
        argv += [] if network else ["--network", "none"]
        for key, value in build_args.items():
            argv += ["--build-arg", f"{key}={value}"]
        assert self.exe is not None
        with context.open("rb") as stdin:
            done = subprocess.run(
                [self.exe, *argv, "-"], env=self.env, stdin=stdin, stdout=log, stderr=subprocess.STDOUT, check=False
            )
        if done.returncode != 0:
            raise GateError(f"docker build failed (exit {done.returncode}; its output above)")

    def image_size(self, image: str) -> int:
        done = self._run(["image", "inspect", "--format", "{{.Size}}", image])
        return int(done.stdout.strip() or 0)

    def image_config(self, image: str) -> dict[str, object]:
        done = self._run(["image", "inspect", "--format", "{{json .Config}}", image])
        if done.returncode != 0:
            raise GateError(f"docker image inspect {image}: {done.stderr.strip()}")
        config: dict[str, object] = json.loads(done.stdout)
        return config

    def run_container(self, argv: Sequence[str], out: IO[str], tee: IO[str]) -> int:
        """`docker run ARGV`, its output written to `out` and to `tee` as it comes; its exit status."""
        assert self.exe is not None
        with subprocess.Popen(
            [self.exe, "run", *argv], env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        ) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                out.write(line)
                tee.write(line)
                tee.flush()
        return proc.returncode

    def copy_out(self, container: str, source: str, target: Path) -> bool:
        return self._run(["cp", f"{container}:{source}", str(target)]).returncode == 0

    def changes(self, container: str) -> list[tuple[str, str]]:
        """(kind, path) of what a stopped container changed in its file system (`docker diff`: A added, C changed,
        D deleted)."""
        done = self._run(["diff", container])
        return [(line[0], line[2:]) for line in done.stdout.splitlines() if len(line) > 2 and line[1] == " "]

    def remove(self, container: str) -> None:
        self._run(["rm", "--force", container])


_BASE_FIX = (
    "a base needs a Python with torch installed and `python` on PATH: the default "
    "(pytorch/pytorch:2.13.0-cuda12.6-cudnn9-runtime), or an image of your own (docs/gpu.md: .ci/cuda-gate makes one "
    "without a registry)"
)
