"""The build context genguard gate sends: the project less what its .dockerignore leaves out (read as docker reads
it), less the artifacts folder and .git, under project/, and the gate's own folder beside it, as one tar: nothing is
written into the project."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from pytest_genguard.gate.context import DockerIgnore, context_files, write_context

IGNORE = ["# comment", "", ".git", "*.pyc", "**/__pycache__", "*.md", "!KEEP.md", "/build", "docs/**", "a?c"]


@pytest.mark.parametrize(
    ("path", "ignored"),
    [
        (".git/objects/ab", True),  # a folder's pattern covers everything below it
        ("top.pyc", True),
        ("pkg/deep.pyc", False),  # `*` stays within one segment, and patterns start at the root, as docker's do
        ("__pycache__/x.pyc", True),
        ("pkg/sub/__pycache__/x", True),  # `**` spans any number of folders, none included
        ("README.md", True),
        ("KEEP.md", False),  # an exception after the pattern brings it back
        ("build/lib/x.py", True),  # a leading slash is dropped
        ("docs/index.md", True),
        ("docsite/index.md", False),
        ("abc", True),
        ("a/c", False),  # `?` is one character, never a slash
        ("pkg/mod.py", False),
    ],
)
def test_dockerignore_patterns_match_as_dockers_do(path: str, ignored: bool) -> None:
    assert DockerIgnore(IGNORE).ignored(path) is ignored


def _tree(root: Path, *files: str) -> None:
    for name in files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(name, encoding="utf-8")


def test_the_context_is_the_project_less_the_ignored_and_the_artifacts_plus_the_gates_folder(tmp_path: Path) -> None:
    root = tmp_path / "project"
    _tree(
        root,
        "pyproject.toml",
        "pkg/__init__.py",
        "tests/test_a.py",
        ".venv/lib/site.py",
        "gate-artifacts/junit.xml",
        ".git/config",
        ".dockerignore",
    )
    (root / ".dockerignore").write_text(".venv\n", encoding="utf-8")
    generated = tmp_path / "generated"
    _tree(generated, "Dockerfile", "wheels/a-1-py3-none-any.whl")
    out = tmp_path / "context.tar"
    count = write_context(out, root, generated, ignore=DockerIgnore.of(root), also_ignored=[root / "gate-artifacts"])
    with tarfile.open(out) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert set(members) == {
        "project",
        "project/.dockerignore",
        "project/pyproject.toml",
        "project/pkg",
        "project/pkg/__init__.py",
        "project/tests",
        "project/tests/test_a.py",
        "genguard-gate/Dockerfile",
        "genguard-gate/wheels",
        "genguard-gate/wheels/a-1-py3-none-any.whl",
    }
    assert count == 6
    generated_members = [m for name, m in members.items() if name.startswith("genguard-gate/")]
    assert all(m.mtime == 0 for m in generated_members)  # the same wheels give the same layer
    assert all(m.uid == 0 and m.uname == "" for m in members.values())
    assert not list(root.rglob("Dockerfile"))  # nothing written into the project
    # .git never goes, whatever .dockerignore says: a checkout's .git/config may hold a CI token.


def test_an_exception_below_an_ignored_folder_is_found(tmp_path: Path) -> None:
    _tree(tmp_path, "models/big.bin", "models/tiny/config.json")
    files = list(context_files(tmp_path, DockerIgnore(["models", "!models/tiny"])))
    assert files == ["models/tiny", "models/tiny/config.json"]
    # Negative control: without the exception the folder is not even walked.
    assert list(context_files(tmp_path, DockerIgnore(["models"]))) == []
