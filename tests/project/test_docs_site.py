"""The documentation site (mkdocs.yml, docs/) builds strictly, and strict means something: a broken link, a broken
anchor, a page left out of the nav and an API reference to a name that does not exist each fail the build. The API
page documents every public name. Needs the docs extra (.ci/run installs it in its main virtualenv)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import pytest_genguard
from pytest_genguard import engines, serving

ROOT = Path(__file__).resolve().parents[2]
API = ROOT / "docs" / "api.md"
TIMEOUT_S = 300

pytest.importorskip("mkdocs", reason="the docs extra is not installed: pip install -e '.[docs]'")


def build(project: Path) -> subprocess.CompletedProcess[str]:
    """`mkdocs build --strict` of `project` (its mkdocs.yml), into a folder of its own."""
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(project / "built")],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """The site's sources (and what its pages include) in a folder a test may break."""
    for name in ("mkdocs.yml", "README.md"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    (tmp_path / "benchmarks").mkdir()
    shutil.copy(ROOT / "benchmarks" / "RESULTS.md", tmp_path / "benchmarks" / "RESULTS.md")
    os.symlink(ROOT / "pytest_genguard", tmp_path / "pytest_genguard")  # the API page's source
    return tmp_path


def test_the_site_builds_strictly(copy: Path) -> None:
    result = build(copy)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (copy / "built" / "api" / "index.html").is_file()


def test_a_broken_link_a_broken_anchor_and_a_page_outside_the_nav_fail_the_build(copy: Path) -> None:
    index = copy / "docs" / "index.md"
    index.write_text(
        index.read_text(encoding="utf-8") + "\n[gone](no-such-page.md) and [off](rule.md#no-such-heading)\n",
        encoding="utf-8",
    )
    (copy / "docs" / "stray.md").write_text("# A page no nav names\n", encoding="utf-8")
    result = build(copy)
    assert result.returncode != 0
    assert "no-such-page.md" in result.stderr
    assert "no-such-heading" in result.stderr
    assert "stray.md" in result.stderr


def test_an_api_reference_to_a_missing_name_fails_the_build(copy: Path) -> None:
    api = copy / "docs" / "api.md"
    api.write_text(api.read_text(encoding="utf-8") + "\n::: pytest_genguard.hf.record.no_such_function\n")
    result = build(copy)
    assert result.returncode != 0
    assert "no_such_function" in result.stderr


def test_the_api_page_documents_every_public_name() -> None:
    documented = re.findall(r"^::: pytest_genguard\.([\w.]+)$", API.read_text(encoding="utf-8"), re.M)
    # The servers' and engines' names are exported by their subpackages (and checked below), the fixture's object by
    # no package.
    own = ("plugin.", "serving.", "engines.")
    names = {path.rsplit(".", 1)[-1] for path in documented if not path.startswith(own)}
    public = set(pytest_genguard.__all__) - {"__version__"}
    assert names == public, (
        f"docs/api.md lacks {sorted(public - names)} and documents {sorted(names - public)} that pytest_genguard "
        "does not export: one `::: pytest_genguard.<module>.<name>` line per exported name"
    )
    for package, entry_points in ((serving, {"record_server", "Endpoint"}), (engines, {"engine"})):
        exported = set(package.__all__)
        prefix = package.__name__.removeprefix("pytest_genguard.")
        names = {path.rsplit(".", 1)[-1] for path in documented if path.startswith(f"{prefix}.")}
        assert entry_points <= names <= exported, (
            f"docs/api.md must document {sorted(entry_points)} of {package.__name__}, and only names it exports: "
            f"{sorted(names - exported)}"
        )
