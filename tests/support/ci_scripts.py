"""Running the cache-building scripts of `.ci/` (vllm-venv, llama-cpp-wheel) the way their tests do: against a
home folder of the test's own, with the environment it sets."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def python_tag() -> str:
    """The X.Y of the `python3` the scripts key their folders by."""
    return subprocess.run(
        ["python3", "-c", "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def run_ci_script(script: str, home_variable: str, home: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """`.ci/<script>` with its home folder (`home_variable`, e.g. GENGUARD_VLLM_HOME) at `home`."""
    return subprocess.run(
        [str(ROOT / ".ci" / script)],
        env={**os.environ, home_variable: str(home), **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
