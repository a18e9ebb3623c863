"""What `genguard gate` reads from a project: which test requirements it installs (the order docs/gpu.md gives), the
files that key the dependency layer, the selection, and the errors that name the file and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_genguard.gate.errors import GateError
from pytest_genguard.gate.project import has_tests, load_project, selected_paths

ROOT = Path(__file__).resolve().parents[2]
TEAM = ROOT / "tests" / "team_project"

PYPROJECT = """
[project]
name = "Acme_Chat"
version = "1"
dependencies = ["transformers>=4.57"]
[project.optional-dependencies]
tests = ["pytest>=8.2", "acme-chat[extra]"]
extra = ["numpy"]
[build-system]
requires = ["setuptools>=69"]
"""


def _project(tmp_path: Path, pyproject: str = PYPROJECT, **files: str) -> Path:
    (tmp_path / "pyproject.toml").write_text(pyproject, encoding="utf-8")
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    return tmp_path


def test_a_test_extra_is_chosen_with_the_dependencies_and_a_self_reference_expanded(tmp_path: Path) -> None:
    project = load_project(_project(tmp_path, **{"requirements-test.txt": "hypothesis\n"}))
    assert project.name == "acme-chat" and project.installable
    assert project.chosen_by == "pyproject.toml's extra 'tests'"
    assert project.requirements == ("transformers>=4.57", "pytest>=8.2", "numpy")
    assert project.requirement_files == () and project.build_requirements == ("setuptools>=69",)


def test_the_command_line_wins_then_the_gate_table_then_a_test_extra_then_a_requirements_file(tmp_path: Path) -> None:
    root = _project(tmp_path, **{"requirements-dev.txt": "-r more.txt\n", "more.txt": "rich\n"})
    assert load_project(root, extras=["extra"]).requirements == ("transformers>=4.57", "numpy")
    assert load_project(root, requirement_files=["more.txt"]).requirement_files == ("more.txt",)
    table = PYPROJECT + '[tool.genguard.gate]\nextras = ["extra"]\nrequirements = ["more.txt"]\n'
    configured = load_project(_project(root, table))
    assert configured.chosen_by == "[tool.genguard.gate]" and configured.requirement_files == ("more.txt",)
    without_extra = PYPROJECT.replace("tests = ", "docs = ").replace("acme-chat[extra]", "mkdocs")
    by_file = load_project(_project(root, without_extra))
    assert by_file.chosen_by == "requirements-dev.txt" and by_file.requirements == ("transformers>=4.57",)
    # The dependency layer is keyed by the declarations, includes followed.
    assert [p.name for p in by_file.declaration_files()] == ["pyproject.toml", "requirements-dev.txt", "more.txt"]
    (root / "requirements-dev.txt").unlink()
    assert load_project(_project(root, without_extra)).chosen_by == "none: the project's dependencies alone"


@pytest.mark.parametrize(
    ("pyproject", "message"),
    [
        (PYPROJECT + "[tool.genguard.gate]\nextra = []\n", "has no key extra"),
        (PYPROJECT.replace('version = "1"', 'version = "1"\ndynamic = ["dependencies"]'), "dependencies are dynamic"),
        (PYPROJECT + '[tool.genguard.gate]\nextras = ["gpu"]\n', "no extra 'gpu'"),
        (PYPROJECT + '[tool.genguard.gate]\ninstall = ["src"]\n', "install names 'src'"),
        (PYPROJECT + "[tool.genguard.gate]\nargs = 'tests'\n", "args must be a list of strings"),
        ("[project\n", "not valid TOML"),
    ],
    ids=["unknown-key", "dynamic", "missing-extra", "missing-install-path", "args-not-a-list", "bad-toml"],
)
def test_bad_configuration_is_an_error_naming_the_file(tmp_path: Path, pyproject: str, message: str) -> None:
    with pytest.raises(GateError, match=message) as raised:
        load_project(_project(tmp_path, pyproject))
    assert str(tmp_path / "pyproject.toml") in str(raised.value)


def test_a_requirements_file_named_on_the_command_line_must_exist(tmp_path: Path) -> None:
    with pytest.raises(GateError, match="no such requirements file"):
        load_project(_project(tmp_path), requirement_files=["missing.txt"])


def test_the_selection_is_the_gate_args_else_testpaths_else_the_root_and_tests_are_found(tmp_path: Path) -> None:
    team = load_project(TEAM)
    assert selected_paths(team) == [TEAM / "tests"] and has_tests(selected_paths(team))
    assert selected_paths(team, ["tests/test_chat_decoding.py::test_greedy_decoding", "-k", "x"]) == [
        TEAM / "tests" / "test_chat_decoding.py"
    ]
    own = load_project(ROOT)
    assert own.args[0] == "@.ci/cuda-gate.args"
    assert ROOT / "examples" / "test_decoding.py" in selected_paths(own)  # read from the @file
    # Negative control: a project with no test file has none.
    empty = load_project(_project(tmp_path))
    assert selected_paths(empty) == [tmp_path] and not has_tests(selected_paths(empty))
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "test_x.py").write_text("", encoding="utf-8")
    assert not has_tests([tmp_path])
    (tmp_path / "check_test.py").write_text("", encoding="utf-8")
    assert has_tests([tmp_path])
