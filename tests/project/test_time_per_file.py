"""`.ci/time_per_file.py`: CI's seconds per test file, summed from a JUnit XML (setup and teardown included)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / ".ci" / "time_per_file.py"

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
<testcase classname="tests.project.test_time_per_file" name="a" time="2.5"/>
<testcase classname="tests.project.test_time_per_file" name="b" time="1.5"/>
<testcase classname="tests.project.test_ci_files" name="c" time="10.0"/>
</testsuite></testsuites>
"""


def test_the_files_are_summed_and_the_slowest_comes_first(tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    junit.write_text(JUNIT, encoding="utf-8")
    out = subprocess.run(
        [sys.executable, str(SCRIPT), str(junit)], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert "14 s in all" in out[0]
    assert out[1].split() == ["10.0", "s", "71.4%", "1", "tests", "tests/project/test_ci_files.py"]
    assert out[2].split() == ["4.0", "s", "28.6%", "2", "tests", "tests/project/test_time_per_file.py"]


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "no.xml")], capture_output=True, text=True)
    assert done.returncode == 2 and "no JUnit XML at" in done.stderr
