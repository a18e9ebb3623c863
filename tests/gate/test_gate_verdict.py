"""The gate's verdict, read from the JUnit XML of a real pytest run (genguard's plugin loaded): a failure, an error or
an unexplained skip fails it, each named on stdout; on the CPU only the GPU-only tests may skip, on the GPU none."""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_genguard.gate.junit import node_id, report_verdict

GATE_TESTS = """
import pytest

def test_passes():
    pass

@pytest.mark.genguard_gpu
def test_on_gpu():
    pass

def test_fails():
    assert False

def test_skipped():
    pytest.skip("x")

class TestGroup:
    def test_in_class(self):
        pass
"""


def _keep(junit: Path, names: set[str], out: Path) -> Path:
    """A copy of `junit` holding only the test cases named `names`."""
    tree = ET.parse(junit)
    for suite in tree.getroot().iter("testsuite"):
        for case in list(suite.iter("testcase")):
            if case.get("name") not in names:
                suite.remove(case)
    tree.write(out)
    return out


def _verdict(junit: Path, device: str, root: Path) -> tuple[bool, str]:
    out = io.StringIO()
    return report_verdict(junit, device, root, out), out.getvalue()


def test_the_verdict_names_what_failed_and_allows_only_the_gpu_tests_to_skip_on_the_cpu(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_gate=GATE_TESTS)
    junit = pytester.path / "junit.xml"
    pytester.runpytest("-p", "no:cacheprovider", f"--junitxml={junit}")
    root = pytester.path

    ok, text = _verdict(junit, "cpu", root)
    assert not ok
    assert "FAILED: 1 failed:\n  test_gate.py::test_fails" in text
    assert "skipped, though the gate must run them here:\n  test_gate.py::test_skipped (x)" in text

    passing = _keep(junit, {"test_passes", "test_on_gpu", "test_in_class"}, root / "passing.xml")
    ok, text = _verdict(passing, "cpu", root)
    assert ok, text
    assert "2 passed, 0 failed, 0 errors, 1 skipped (1 GPU-only) of 3 tests on the CPU" in text
    # On the GPU nothing may skip: the GPU-only test skipped there proves nothing.
    ok, text = _verdict(passing, "gpu", root)
    assert not ok and "test_gate.py::test_on_gpu (" in text

    ok, text = _verdict(_keep(junit, {"test_on_gpu"}, root / "skipped.xml"), "cpu", root)
    assert not ok and "no test passed" in text
    ok, text = _verdict(_keep(junit, set(), root / "none-ran.xml"), "cpu", root)
    assert not ok and "no tests ran" in text
    ok, text = _verdict(root / "missing.xml", "cpu", root)
    assert not ok and "wrote no JUnit XML" in text


def test_a_node_id_is_rebuilt_from_the_dotted_class_name(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text("", encoding="utf-8")
    assert node_id("tests.test_x.TestGroup", "test_a", tmp_path) == "tests/test_x.py::TestGroup::test_a"
    assert node_id("tests.test_x", "test_b[1]", tmp_path) == "tests/test_x.py::test_b[1]"
    assert node_id("elsewhere.test_y", "test_c", tmp_path) == "elsewhere::test_y::test_c"
