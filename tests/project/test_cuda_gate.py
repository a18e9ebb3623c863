"""The CUDA gate (Dockerfile.cuda, .ci/cuda-gate): the image runs exactly the selection written once in
.ci/cuda-gate.args, everything selected can run in the image, the CPU command is the image's GPU command minus
`--genguard-gpu`, and the verdict read from the JUnit XML fails on whatever the gate could not prove.

The image itself is built and its gate run by CI's cuda-gate leg (.ci/run), with its negative control (an edited
snapshot fails it); these tests check what can be checked without a container, each with its negative control."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import dockerfile
import pytest

ROOT = Path(__file__).resolve().parents[2]
SELECTION = ROOT / ".ci" / "cuda-gate.args"
SELECTION_ARG = "@.ci/cuda-gate.args"
HELPER = ROOT / ".ci" / "cuda_gate.py"
GATE = ROOT / ".ci" / "cuda-gate"
TIMEOUT_S = 120

# Why a test cannot run in the image, and how its file (or a conftest.py above it) shows it.
CANNOT_RUN_IN_THE_IMAGE = {
    "needs git and a git checkout (.dockerignore drops .git)": re.compile(r"[\"']git[\"']"),
    "runs a real server or build only when an environment variable the gate does not set says so": re.compile(
        r"GENGUARD_(VLLM|LLAMA|BISECT_E2E)\w*"
    ),
    "runs a build script of .ci/ (cmake, uv; their caches live outside the image)": re.compile(
        r"llama-cpp-wheel|vllm-venv|\.ci/"
    ),
    "needs Chromium (the HTML report's browser test)": re.compile(r"chromium", re.I),
    "needs Gemma 3 270M's four packages, which the image does not install (its folder and GGUF would add 1.3 GB and "
    "a minute's build on every change to the package)": re.compile(r"gemma3_(folder|gguf)|load_gemma3"),
}


def selection() -> list[str]:
    return SELECTION.read_text(encoding="utf-8").splitlines()


def selected_by(argv: list[str], pytester: pytest.Pytester) -> list[str]:
    """The test paths pytest reads from a Dockerfile CMD's arguments: its own parser (`@file` expanded, option values
    told from paths), run where the selection file lies where the image's WORKDIR has it."""
    (pytester.path / ".ci").mkdir(exist_ok=True)
    (pytester.path / ".ci" / SELECTION.name).write_text(SELECTION.read_text(encoding="utf-8"), encoding="utf-8")
    return list(pytester.parseconfig(*argv[1:]).args)


def selection_problems(dockerfile_text: str, pytester: pytest.Pytester) -> list[str]:
    """Why the image of `dockerfile_text` would not run exactly the gate's selection (empty: it does)."""
    argv = dockerfile.cmd(dockerfile_text)
    problems = []
    if argv[0] != "pytest":
        problems.append(f"the command is not pytest: {argv[0]}")
    files = [arg for arg in argv if arg.startswith("@")]
    if files != [SELECTION_ARG]:
        problems.append(f"the command reads {files or 'no argument file'}, not the selection ({SELECTION_ARG} once)")
    selected = selected_by(argv, pytester)
    if selected != selection():
        problems.append(f"the command selects {selected}, not .ci/cuda-gate.args: {selection()}")
    return problems


def test_the_image_runs_exactly_the_gate_selection(pytester: pytest.Pytester) -> None:
    assert selection_problems(dockerfile.DOCKERFILE.read_text(encoding="utf-8"), pytester) == []


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (lambda argv: [*argv, "tests/core"], "the command selects"),  # a path besides the selection
        (lambda argv: [a for a in argv if a != SELECTION_ARG] + selection()[:2], "not the selection"),
        (lambda argv: [a.replace(SELECTION_ARG, "@.ci/other.args") for a in argv], "not the selection"),
    ],
    ids=["a-path-besides-it", "paths-instead-of-the-file", "another-file"],
)
def test_a_dockerfile_with_another_selection_fails_the_check(
    pytester: pytest.Pytester, edit: Callable[[list[str]], list[str]], problem: str
) -> None:
    text = dockerfile.DOCKERFILE.read_text(encoding="utf-8")
    argv = dockerfile.cmd(text)
    (line,) = [line for line in text.splitlines() if line.startswith("CMD ")]
    start = text.index(line)
    end = text.index("]", start) + 1
    if "@.ci/other.args" in json.dumps(edit(argv)):
        (pytester.path / ".ci").mkdir(exist_ok=True)
        (pytester.path / ".ci" / "other.args").write_text("tests/core\n", encoding="utf-8")
    edited = text[:start] + "CMD " + json.dumps(edit(argv)) + text[end:]
    problems = selection_problems(edited, pytester)
    assert any(problem in p for p in problems), problems


def test_the_selection_is_one_existing_test_path_per_line() -> None:
    lines = selection()
    assert lines, ".ci/cuda-gate.args selects nothing"
    # pytest reads each line of an @file as one argument: a blank line or a comment would be a path.
    assert all(line and line == line.strip() and not line.startswith(("-", "#")) for line in lines), lines
    missing = [line for line in lines if not (ROOT / line.split("::")[0]).exists()]
    assert not missing, f".ci/cuda-gate.args names paths that do not exist: {missing}"


def _selected_files() -> list[Path]:
    files: list[Path] = []
    for line in selection():
        path = ROOT / line.split("::")[0]
        files += sorted(path.rglob("test_*.py")) if path.is_dir() else [path]
    return files


def reasons_it_cannot_run_in_the_image(test_file: Path) -> list[str]:
    """What the image lacks that `test_file` (or a conftest.py between it and the root) needs."""
    texts = [test_file.read_text(encoding="utf-8")]
    for folder in test_file.parents:
        if folder == ROOT.parent:
            break
        if (folder / "conftest.py").is_file():
            texts.append((folder / "conftest.py").read_text(encoding="utf-8"))
    return [reason for reason, pattern in CANNOT_RUN_IN_THE_IMAGE.items() if any(pattern.search(t) for t in texts)]


def test_everything_the_gate_selects_can_run_in_the_image() -> None:
    assert ".git" in (ROOT / ".dockerignore").read_text(encoding="utf-8").split()  # the image has no checkout
    found = {str(f.relative_to(ROOT)): why for f in _selected_files() if (why := reasons_it_cannot_run_in_the_image(f))}
    assert not found, f"the gate selects tests the image cannot run: {found}"


def test_the_gate_selects_every_example_the_image_can_run() -> None:
    # The examples are listed one by one (Gemma 3's cannot run in the image): a new example joins the gate here.
    runnable = {str(p.relative_to(ROOT)) for p in (ROOT / "examples").glob("test_*.py")}
    runnable -= {f for f in runnable if reasons_it_cannot_run_in_the_image(ROOT / f)}
    assert runnable and runnable <= {str(f.relative_to(ROOT)) for f in _selected_files()}, sorted(runnable)


@pytest.mark.parametrize(
    ("outside", "reason"),
    [
        ("tests/hf/test_pins_under_git.py", "needs git"),
        ("tests/serving/test_vllm_server.py", "environment variable"),
        ("tests/engines/test_llama_server.py", "environment variable"),
        ("tests/project/test_llama_cpp_wheel_script.py", "build script of .ci/"),
        ("tests/plugin/test_report_browser.py", "Chromium"),
        ("examples/test_gemma3_base_model.py", "Gemma 3 270M's four packages"),
    ],
)
def test_tests_outside_the_gate_are_found_with_their_reason(outside: str, reason: str) -> None:
    # Negative control of the check above: the tests the image cannot run are found, each with its reason.
    assert outside not in selection()
    reasons = reasons_it_cannot_run_in_the_image(ROOT / outside)
    assert any(reason in r for r in reasons), reasons


def _helper(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(HELPER), *args], input=stdin, capture_output=True, text=True, timeout=TIMEOUT_S
    )


def test_the_cpu_gate_is_the_image_command_minus_the_gpu_flag_and_the_gpu_gate_is_it_unchanged() -> None:
    argv = dockerfile.cmd()
    cpu = _helper("command", "cpu", stdin=json.dumps(argv))
    gpu = _helper("command", "gpu", stdin=json.dumps(argv))
    assert cpu.returncode == gpu.returncode == 0, cpu.stderr + gpu.stderr
    assert cpu.stdout.split("\0") == [arg for arg in argv if arg != "--genguard-gpu"]
    assert gpu.stdout.split("\0") == argv
    # The report and the JUnit XML land where .ci/cuda-gate copies them from.
    assert {"/artifacts/junit.xml", "/artifacts/genguard-report.html"} <= set(argv)
    # Negative control: an image whose command is not the GPU gate has no CPU form.
    refused = _helper("command", "cpu", stdin=json.dumps([a for a in argv if a != "--genguard-gpu"]))
    assert refused.returncode != 0 and "--genguard-gpu exactly once" in refused.stderr


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


def test_the_verdict_names_what_failed_and_allows_only_the_gpu_tests_to_skip_on_the_cpu(
    pytester: pytest.Pytester,
) -> None:
    # The JUnit XML of a real pytest run, genguard's plugin loaded: its own skip reason for the GPU-only test.
    pytester.makepyfile(test_gate=GATE_TESTS)
    junit = pytester.path / "junit.xml"
    pytester.runpytest("-p", "no:cacheprovider", f"--junitxml={junit}")
    root = str(pytester.path)

    failed = _helper("verdict", str(junit), "cpu", root)
    assert failed.returncode == 1
    assert "FAILED: 1 failed:\n  test_gate.py::test_fails" in failed.stderr
    assert "skipped, though the gate must run them here:\n  test_gate.py::test_skipped (x)" in failed.stderr

    passing = _keep(junit, {"test_passes", "test_on_gpu"}, pytester.path / "passing.xml")
    on_cpu = _helper("verdict", str(passing), "cpu", root)
    assert on_cpu.returncode == 0, on_cpu.stderr
    assert "1 passed, 0 failed, 0 errors, 1 skipped (1 GPU-only) of 2 tests on the CPU" in on_cpu.stdout
    # On the GPU nothing may skip: the GPU-only test skipped there proves nothing.
    on_gpu = _helper("verdict", str(passing), "gpu", root)
    assert on_gpu.returncode == 1
    assert "test_gate.py::test_on_gpu (" in on_gpu.stderr

    nothing_ran = _keep(junit, {"test_on_gpu"}, pytester.path / "skipped.xml")
    result = _helper("verdict", str(nothing_ran), "cpu", root)
    assert result.returncode == 1 and "no test passed" in result.stderr
    missing = _helper("verdict", str(pytester.path / "none.xml"), "cpu", root)
    assert missing.returncode == 1 and "wrote no JUnit XML" in missing.stderr


def _gate(home: Path, *args: str, **env: str | None) -> subprocess.CompletedProcess[str]:
    merged = {**os.environ, "GENGUARD_CUDA_GATE_HOME": str(home), **env}
    return subprocess.run(
        [str(GATE), *args],
        env={k: v for k, v in merged.items() if v is not None},
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


def test_the_gate_script_refuses_an_unnamed_or_unwritable_artifacts_folder_before_building(tmp_path: Path) -> None:
    home = tmp_path / "home"
    unset = _gate(home, GENGUARD_GATE_ARTIFACTS=None)
    assert unset.returncode == 2
    assert "GENGUARD_GATE_ARTIFACTS is not set" in unset.stderr
    (tmp_path / "a-file").write_text("", encoding="utf-8")
    unwritable = _gate(home, GENGUARD_GATE_ARTIFACTS=str(tmp_path / "a-file" / "artifacts"))
    assert unwritable.returncode == 2
    assert "is not a folder this user can write to" in unwritable.stderr
    bad_torch = _gate(home, "--torch", "rocm", GENGUARD_GATE_ARTIFACTS=str(tmp_path / "artifacts"))
    assert bad_torch.returncode == 2 and "--torch is cpu or cuda" in bad_torch.stderr
    assert not home.exists()  # nothing built, no daemon started


def test_the_declared_pytest_floor_reads_the_selection_file() -> None:
    # The image's command passes its selection as @.ci/cuda-gate.args: pytest reads argument files from 8.2 on, so the
    # declared floor must be at least 8.2 (it was 8.1: a user's image at the floor took the file name for a path).
    import tomllib

    from packaging.requirements import Requirement
    from packaging.version import Version

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    pytest_req = next(Requirement(d) for d in project["dependencies"] if Requirement(d).name == "pytest")
    assert not pytest_req.specifier.contains(Version("8.1.2")), f"pyproject.toml declares {pytest_req}: raise it to 8.2"
    assert pytest_req.specifier.contains(Version("8.2.0")), pytest_req
