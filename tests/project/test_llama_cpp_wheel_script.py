"""`.ci/llama-cpp-wheel` (CI builds or reuses llama-cpp-python's wheel with it) fails loudly when the
source cannot be had, leaves nothing a later run would take for a built wheel, and reuses a complete folder."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from ci_scripts import python_tag, run_ci_script

ROOT = Path(__file__).resolve().parents[2]


def run_script(home: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return run_ci_script("llama-cpp-wheel", "GENGUARD_LLAMA_HOME", home, **env)


def test_a_download_that_fails_says_so_and_leaves_no_folder(tmp_path: Path) -> None:
    # No index and no find-links: pip has nowhere to get the source distribution from.
    result = run_script(tmp_path / "home", PIP_NO_INDEX="1", PIP_FIND_LINKS="", PIP_CONFIG_FILE=os.devnull)
    assert result.returncode != 0
    assert "llama-cpp-wheel: FAILED to download the source distribution of llama-cpp-python==0.3.36" in result.stderr
    assert result.stdout == ""  # no path printed: the caller has nothing to use
    left = sorted(p.name for p in (tmp_path / "home").iterdir())
    assert [name for name in left if not name.endswith(".lock")] == []  # the half-built folder is gone


def recipe() -> int:
    """The script's recipe number (the engine's `llama_cpp.RECIPE` must be the same: tests/engines checks it)."""
    found = re.search(r"^RECIPE=(\d+)", (ROOT / ".ci" / "llama-cpp-wheel").read_text(encoding="utf-8"), re.MULTILINE)
    assert found is not None
    return int(found.group(1))


def test_a_complete_folder_at_its_versioned_path_is_reused_not_rebuilt(tmp_path: Path) -> None:
    home = tmp_path / "home"
    folder = home / f"llama-cpp-python-0.3.36-py{python_tag()}-recipe{recipe()}"
    wheel = folder / "llama_cpp_python-0.3.36-cp311-cp311-linux_x86_64.whl"
    converter = folder / "sdist" / "vendor" / "llama.cpp" / "convert_hf_to_gguf.py"
    converter.parent.mkdir(parents=True)
    converter.write_text("", encoding="utf-8")
    wheel.write_bytes(b"")  # stands in for the built wheel
    server = folder / "server" / "llama-server"
    server.parent.mkdir()
    server.write_bytes(b"")
    server.chmod(0o755)
    result = run_script(home, PIP_NO_INDEX="1")  # reusing needs no download
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(wheel)
    assert "building" not in result.stderr
    # Negative controls: without llama-server, or without the kept source (the engine's converter), the folder is not
    # complete: it rebuilds.
    server.chmod(0o644)
    assert "llama-cpp-wheel: building" in run_script(home, PIP_NO_INDEX="1", PIP_FIND_LINKS="").stderr
    server.chmod(0o755)
    converter.unlink()
    rebuilt = run_script(home, PIP_NO_INDEX="1", PIP_FIND_LINKS="", PIP_CONFIG_FILE=os.devnull)
    assert rebuilt.returncode != 0
    assert "llama-cpp-wheel: building" in rebuilt.stderr
