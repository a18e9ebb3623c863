"""``python -m pytest_genguard.cli`` runs the console script (CI's server leg calls it so): the package has its
``__main__``."""

from __future__ import annotations

import subprocess
import sys


def test_python_dash_m_runs_the_console_script() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest_genguard.cli", "fidelity", "--help"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "4 unproven" in " ".join(done.stdout.split())
    bad = subprocess.run(
        [sys.executable, "-m", "pytest_genguard.cli", "nope"], capture_output=True, text=True, check=False
    )
    assert bad.returncode == 2 and "invalid choice: 'nope'" in bad.stderr
