"""One Dockerfile template: Dockerfile.cuda is what it renders for genguard's own project (byte for byte), a team's
project gets the same file with its own layers (genguard's wheel, its package, its selection), and the CPU command is
the image's GPU command minus `--genguard-gpu`."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import dockerfile
import pytest

from pytest_genguard.gate.dockerfile import GPU_FLAG, cpu_command, gate_command, render
from pytest_genguard.gate.project import load_project

ROOT = Path(__file__).resolve().parents[2]
TEAM = ROOT / "tests" / "team_project"


def test_dockerfile_cuda_is_the_template_rendered_for_genguards_own_project() -> None:
    rendered = render(load_project(ROOT))
    assert rendered == (ROOT / "Dockerfile.cuda").read_text(encoding="utf-8"), (
        "Dockerfile.cuda differs from what the template renders: genguard gate --dockerfile > Dockerfile.cuda"
    )


def test_a_change_to_the_gate_table_changes_the_rendering(tmp_path: Path) -> None:
    # Negative control of the check above: the rendering follows pyproject.toml's [tool.genguard.gate].
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(
        ROOT / "pytest_genguard", tmp_path / "pytest_genguard", ignore=shutil.ignore_patterns("__pycache__")
    )
    (tmp_path / ".ci").mkdir()
    shutil.copy(ROOT / ".ci" / "cuda-gate.args", tmp_path / ".ci")
    text = (tmp_path / "pyproject.toml").read_text(encoding="utf-8")
    (tmp_path / "pyproject.toml").write_text(text.replace('"-n", "2"', '"-n", "4"'), encoding="utf-8")
    edited = render(load_project(tmp_path))
    assert edited != (ROOT / "Dockerfile.cuda").read_text(encoding="utf-8")
    assert '"-n", "4"' in edited


def test_a_team_project_gets_genguards_wheel_its_package_and_its_testpaths() -> None:
    text = render(load_project(TEAM))
    parsed = dockerfile.instructions(text)
    copies = [args for name, args in parsed if name == "COPY"]
    assert copies == [
        "genguard-gate/requirements.txt genguard-gate/no-deps.txt /tmp/genguard-gate/",
        "genguard-gate/wheels /tmp/genguard-gate/wheels",
        "genguard-gate/genguard /tmp/genguard-gate/genguard",
        "--chown=genguard:genguard project/ /workspace/",  # the project alone: the gate's folder stays out
    ], copies
    runs = [args for name, args in parsed if name == "RUN"]
    assert any("/tmp/genguard-gate/genguard/*.whl" in run for run in runs)
    assert any("--editable ." in run for run in runs)
    # The selection is the project's own: pytest reads its testpaths in the image.
    assert dockerfile.cmd(text) == gate_command(load_project(TEAM))
    assert dockerfile.cmd(text)[:2] == ["pytest", GPU_FLAG]
    assert [args for name, args in parsed if name == "USER"] == ["10001:10001"]
    assert "acme-chat decoding gate" in text and "pytorch/pytorch:2.13.0-cuda12.6" in text
    assert "{{" not in text


def test_the_genguard_wheel_layer_is_only_for_other_projects() -> None:
    assert "genguard-gate/genguard" not in (ROOT / "Dockerfile.cuda").read_text(encoding="utf-8")


def test_hadolint_passes_a_team_projects_dockerfile(tmp_path: Path) -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    if not hadolint.is_file():
        pytest.skip("hadolint is not installed; install the test extra: pip install -e '.[test]'")
    path = tmp_path / "Dockerfile"
    path.write_text(render(load_project(TEAM)), encoding="utf-8")
    done = subprocess.run([str(hadolint), "--no-color", str(path)], capture_output=True, text=True, check=False)
    assert done.returncode == 0 and not done.stdout.strip(), done.stdout + done.stderr


def test_the_cpu_command_is_the_gpu_command_minus_the_gpu_flag() -> None:
    argv = dockerfile.cmd()
    assert cpu_command(argv) == [arg for arg in argv if arg != GPU_FLAG]
    assert {"/artifacts/junit.xml", "/artifacts/genguard-report.html"} <= set(argv)
    # Negative control: a command that is not the GPU gate has no CPU form.
    with pytest.raises(ValueError, match="exactly once"):
        cpu_command(cpu_command(argv))
    with pytest.raises(ValueError, match="exactly once"):
        cpu_command([*argv, GPU_FLAG])


def test_genguard_gate_dockerfile_prints_the_rendering_for_the_project_it_runs_in() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest_genguard.cli", "gate", "--dockerfile", "--project", str(TEAM)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == render(load_project(TEAM))
