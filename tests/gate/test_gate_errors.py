"""Every way `genguard gate` cannot run is an error that names the fix, found before anything is built: no docker, no
daemon, a base that cannot be run, has no torch or (with --gpu) cannot be given a GPU or has a CPU-only torch, a
Python the host's wheels do not fit, no tests, an artifacts folder that cannot be written, a missing mount.

The daemon's answers are played by a stand-in `docker` on PATH (a script that prints what docker prints); the real
client is asked once, against a socket where no daemon listens. The image's build and run are CI's (.ci/run's CUDA
lane, with their negative controls)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_genguard.gate.docker import Docker
from pytest_genguard.gate.errors import GateError
from pytest_genguard.gate.run import GateOptions, cache_dir, run_gate

ROOT = Path(__file__).resolve().parents[2]
TEAM = ROOT / "tests" / "team_project"
BASE = {"python": "{}.{}".format(*sys.version_info[:2]), "machine": os.uname().machine, "system": "Linux"}


def _docker(tmp_path: Path, *, version: str = "27.0", run_out: str = "", run_err: str = "", run_rc: int = 0) -> Docker:
    """A Docker whose `docker` is a script answering `version` and `run` as told (and recording every call)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "docker"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> "{tmp_path}/calls"\n'
        'case "$1" in\n'
        f"  version) echo '{version}'; exit 0 ;;\n"
        f"  run) printf '%s' '{run_out}'; printf '%s\\n' '{run_err}' >&2; exit {run_rc} ;;\n"
        "esac\nexit 1\n",
        encoding="utf-8",
    )
    script.chmod(0o755)
    return Docker({"PATH": str(bin_dir)})


def _base_line(**info: object) -> str:
    return "GENGUARD-BASE " + json.dumps({**BASE, "distributions": [], "torch": "2.13.0", **info}) + "\n"


def test_no_docker_on_path_says_how_to_install_it(tmp_path: Path) -> None:
    with pytest.raises(GateError, match="docker is not on PATH: install Docker Engine"):
        Docker({"PATH": str(tmp_path)}).check_daemon()


def test_no_daemon_answering_says_how_to_start_one(tmp_path: Path) -> None:
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("the docker client is not installed (.ci/run installs docker.io)")
    env = {"PATH": str(Path(docker).parent), "DOCKER_HOST": f"unix://{tmp_path}/no-daemon.sock"}
    with pytest.raises(GateError) as raised:
        Docker(env).check_daemon()
    message = str(raised.value)
    assert f"no docker daemon answers at unix://{tmp_path}/no-daemon.sock" in message
    assert "sudo systemctl start docker" in message and "DOCKER_HOST" in message


@pytest.mark.parametrize(
    ("answer", "gpu", "message"),
    [
        (dict(run_out=_base_line(torch=None)), False, "has no torch installed"),
        (
            dict(
                run_err='docker: Error response from daemon: could not select device driver "" with capabilities: '
                "[[gpu]].",
                run_rc=125,
            ),
            True,
            "--gpu: docker cannot give a container a GPU here",
        ),
        (dict(run_out=_base_line(cuda=None, cuda_available=False)), True, "has a CPU-only torch"),
        (dict(run_out=_base_line(cuda="12.6", cuda_available=False)), True, "sees no usable GPU"),
        (
            dict(run_err="Unable to find image 'acme/base:1' locally ... pull access denied", run_rc=125),
            False,
            "could not run the base image acme/base:1",
        ),
        (dict(run_err='exec: "python": executable file not found in $PATH', run_rc=127), False, "no `python` on PATH"),
    ],
    ids=["no-torch", "no-gpu-runtime", "cpu-torch-on-gpu", "no-usable-gpu", "cannot-pull", "no-python"],
)
def test_the_base_is_asked_what_it_holds_and_each_refusal_names_the_fix(
    tmp_path: Path, answer: dict[str, object], gpu: bool, message: str
) -> None:
    docker = _docker(tmp_path, **answer)  # type: ignore[arg-type]
    with pytest.raises(GateError, match=message) as raised:
        docker.probe_base("acme/base:1", gpu=gpu)
    if gpu and "GPU here" in message:
        assert "NVIDIA Container Toolkit" in str(raised.value) and "without --gpu" in str(raised.value)
    calls = (tmp_path / "calls").read_text(encoding="utf-8")
    assert ("--gpus all" in calls) is gpu and "--network none" in calls


def test_a_base_that_holds_torch_is_described(tmp_path: Path) -> None:
    line = _base_line(torch="2.13.0+cu126", cuda="12.6", cuda_available=True, distributions=[["numpy", "2.3.0"]])
    base = _docker(tmp_path, run_out=line).probe_base("acme/base:1", gpu=True)
    assert (base.torch, base.torch_public, base.cuda) == ("2.13.0+cu126", "2.13.0", "12.6")
    assert base.distributions == (("numpy", "2.3.0"),)


def test_another_python_in_the_base_is_refused_before_building(tmp_path: Path) -> None:
    docker = _docker(tmp_path, run_out=_base_line(python="3.99"))
    options = GateOptions(project=TEAM, base="acme/base:1", artifacts=tmp_path / "artifacts")
    with pytest.raises(GateError, match=r"has Python 3\.99 and genguard gate runs on Python") as raised:
        run_gate(options, docker)
    assert "--pip-index" in str(raised.value)
    assert "build" not in (tmp_path / "calls").read_text(encoding="utf-8").split()


def test_a_project_without_tests_is_refused_before_docker_is_asked(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "empty"\nversion = "1"\n', encoding="utf-8")
    docker = _docker(tmp_path)
    with pytest.raises(GateError, match="no tests found") as raised:
        run_gate(GateOptions(project=tmp_path, artifacts=tmp_path / "artifacts"), docker)
    assert "testpaths" in str(raised.value) and "genguard gate -- tests/" in str(raised.value)
    assert not (tmp_path / "calls").exists()


def test_an_unwritable_artifacts_folder_and_a_missing_mount_are_refused(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("", encoding="utf-8")
    docker = _docker(tmp_path)
    with pytest.raises(GateError, match="not a folder this user can write to"):
        run_gate(GateOptions(project=TEAM, artifacts=tmp_path / "a-file" / "artifacts"), docker)
    with pytest.raises(GateError, match=r"--models .*no such folder"):
        run_gate(GateOptions(project=TEAM, artifacts=tmp_path / "out", models=(tmp_path / "nope",)), docker)
    with pytest.raises(GateError, match=r"--hf-cache .*no such folder"):
        run_gate(GateOptions(project=TEAM, artifacts=tmp_path / "out", hf_cache=tmp_path / "nope"), docker)
    assert not (tmp_path / "calls").exists()


def test_a_mounted_folder_with_a_file_only_its_owner_may_read_is_refused(tmp_path: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    (models / "config.json").write_text("{}", encoding="utf-8")
    (models / "model.safetensors").write_bytes(b"")
    (models / "model.safetensors").chmod(0o600)  # as save_pretrained leaves it
    docker = _docker(tmp_path, run_err="Unable to find image 'acme/base:1' locally", run_rc=125)
    options = GateOptions(project=TEAM, base="acme/base:1", artifacts=tmp_path / "out", models=(models,))
    with pytest.raises(GateError, match=r"model\.safetensors is not readable by other users") as raised:
        run_gate(options, docker)
    assert f"chmod -R o+rX {models}" in str(raised.value)
    assert not (tmp_path / "calls").exists()
    # Negative control: readable by all, the folder passes and the gate goes on (to the base, here a missing one).
    (models / "model.safetensors").chmod(0o644)
    with pytest.raises(GateError, match="could not run the base image acme/base:1"):
        run_gate(options, docker)


def test_pytest_arguments_go_after_a_double_dash(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest_genguard.cli", "gate", "--project", str(TEAM), "tests"],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert "put pytest's arguments after --: genguard gate -- tests" in done.stderr


def test_the_gate_cache_is_genguards_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from pytest_genguard.bisection.environments import cache_root

    monkeypatch.delenv("GENGUARD_CACHE_DIR", raising=False)
    assert cache_dir() == cache_root() / "gate"
    monkeypatch.setenv("GENGUARD_CACHE_DIR", str(tmp_path))
    assert cache_dir() == cache_root() / "gate" == tmp_path / "gate"
