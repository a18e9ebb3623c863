"""The releases genguard bisect chooses from, listed by the pip the user has: a virtualenv made with
``python -m venv`` here gets pip 23.2.1, whose ``pip index versions`` has no ``--json`` (later pips added it); before,
bisect stopped at "pip failed (exit 2): no such option: --json" (issue 33). The index is a local find-links folder
(pip reads ``PIP_*`` variables), so no network is needed."""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

import pytest

from pytest_genguard import cli
from pytest_genguard.bisection.releases import ReleaseError, index_versions

RELEASES = ("1.0.0", "1.1.0", "2.0.0rc1")


@pytest.fixture(scope="module")
def old_pip(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The python of a virtualenv made as a user makes one (``python -m venv``: the pip bundled with Python)."""
    folder = tmp_path_factory.mktemp("venv")
    venv.create(folder, with_pip=True)
    python = str(folder / "bin" / "python")
    version = subprocess.run([python, "-m", "pip", "--version"], capture_output=True, text=True, check=True).stdout
    probe = subprocess.run([python, "-m", "pip", "index", "versions", "--help"], capture_output=True, text=True)
    if "--json" in probe.stdout:
        pytest.skip(f"this Python bundles {version.split()[1]}, which has --json: the case needs an older pip")
    return python


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A find-links folder holding three releases of `fakepkg`, and pip told to use it alone."""
    for release in RELEASES:
        (tmp_path / f"fakepkg-{release}-py3-none-any.whl").write_bytes(b"")  # pip lists files by their names
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("pip", ["old", "this"])
def test_the_releases_are_listed_with_the_pip_the_user_has(old_pip: str, index: Path, pip: str) -> None:
    python = old_pip if pip == "old" else sys.executable
    assert index_versions("fakepkg", python=python) == ["1.1.0", "1.0.0"]
    assert index_versions("fakepkg", python=python, pre=True) == ["2.0.0rc1", "1.1.0", "1.0.0"]


def test_an_unknown_package_is_still_pips_error_naming_it(old_pip: str, index: Path) -> None:
    with pytest.raises(ReleaseError, match=r"listing the releases of nopkg with pip failed \(exit 1\)"):
        index_versions("nopkg", python=old_pip)


def test_a_pip_without_the_index_command_is_named_with_the_pip_bisect_needs(tmp_path: Path) -> None:
    """pip before 21.2 has no ``pip index``: say which pip is needed (a stand-in answers as such a pip does)."""
    fake = tmp_path / "python"
    fake.write_text('#!/bin/sh\necho "ERROR: unknown command \\"index\\"" >&2\nexit 1\n')
    fake.chmod(0o755)
    with pytest.raises(ReleaseError) as info:
        index_versions("transformers", python=str(fake))
    assert "pip 21.2 or newer" in str(info.value) and "python -m pip install --upgrade pip" in str(info.value)


@pytest.mark.parametrize("flag", ["--good", "--bad"])
def test_a_version_that_is_not_one_is_genguards_error_before_pip_runs(
    flag: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "test_x.py").write_text("def test_y():\n    pass\n")
    monkeypatch.chdir(tmp_path)
    from pytest_genguard.bisection import driver

    def no_pip(*args: object, **kwargs: object) -> list[str]:
        raise AssertionError("pip must not run: before, pip 23.2.1 answered first with its own error")

    monkeypatch.setattr(driver, "index_versions", no_pip)
    other = "--bad" if flag == "--good" else "--good"
    assert cli.main(["bisect", "test_x.py::test_y", flag, "notaversion", other, "5.0.0"]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert f"{flag}: 'notaversion' is not a version (for example 5.3.0)" in err
    assert "pip" not in err
