"""The documents stay true: CONTRIBUTING.md's module map names every module (and no line counts, which went stale by
hand), and the design it points to is in the repository; every page installs genguard as README does (it is not on
PyPI); the home page's reading list names every page of the site."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from install_lines import installs_by_name

ROOT = Path(__file__).resolve().parents[2]
CONTRIBUTING = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_the_module_map_names_every_module_of_the_tiers() -> None:
    rows = set(re.findall(r"^\| `([\w.]+\.py)` \|", CONTRIBUTING, re.M))
    modules = {
        p.name for tier in ("core", "hf", "plugin", "engines") for p in (ROOT / "pytest_genguard" / tier).glob("*.py")
    }
    missing = sorted(modules - rows - {"__init__.py"})
    assert not missing, f"CONTRIBUTING.md's module map lacks {missing}: add a row saying what each owns"


def test_the_module_map_keeps_no_line_counts() -> None:
    assert not re.search(r"^\| `[\w.]+\.py` \|.*\| \d+ \|$", CONTRIBUTING, re.M)


def test_the_design_contributors_read_first_is_in_the_repository() -> None:
    assert "../shared" not in CONTRIBUTING
    assert "docs/design.md" in CONTRIBUTING and (ROOT / "docs" / "design.md").is_file()


def test_every_page_installs_genguard_as_the_readme_does() -> None:
    found = {page.name: installs_by_name(page.read_text(encoding="utf-8")) for page in PAGES}
    found = {name: lines for name, lines in found.items() if lines}
    assert not found, f"genguard is not on PyPI: install it from a clone, as README's install snippet does: {found}"
    quickstart = (ROOT / "docs" / "quickstart.md").read_text(encoding="utf-8")
    assert '--8<-- "README.md:install"' in quickstart, "the docs' install instructions are README's snippet"


@pytest.mark.parametrize(
    ("line", "found"),
    [
        ('pip install "pytest-genguard[quant]"', True),
        ("virtualenv with `pip install --no-deps pytest-genguard rich`", True),
        ('pip install "/path/to/pytest-genguard[quant]"', False),
        ("pip install /path/to/pytest-genguard  # a clone", False),
        ("`pytest-genguard @ git+<URL>@<tag>` in a requirements file", False),
        ("pip install -e . -r requirements-test.txt  # pytest-genguard among them", False),
    ],
)
def test_the_install_check_tells_a_package_name_from_a_path(line: str, found: bool) -> None:
    # Negative controls: the lines the docs had (by name) are found; README's (a path) are not.
    assert bool(installs_by_name(f"text\n{line}\n")) is found


def nav_pages() -> set[str]:
    """Every page of the site's nav (mkdocs.yml)."""
    yaml = pytest.importorskip("yaml")
    found: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, str):
            found.add(node)
        elif isinstance(node, list):
            for item in node:
                walk(item)
        elif isinstance(node, dict):
            for value in node.values():
                walk(value)

    walk(yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"])
    return found


def unlisted_pages(index: str, pages: set[str]) -> list[str]:
    """The pages (other than the home page) that the home page's "Where to read next" does not link."""
    found = re.search(r"^## Where to read next\n(.*?)(?=^## |\Z)", index, re.M | re.S)
    assert found, "docs/index.md has no 'Where to read next'"
    linked = set(re.findall(r"\]\(([\w-]+\.md)(?:#[\w-]*)?\)", found.group(1)))
    return sorted(pages - linked - {"index.md"})


def test_the_home_page_reading_list_names_every_page() -> None:
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    missing = unlisted_pages(index, nav_pages())
    assert not missing, f"docs/index.md's 'Where to read next' lacks {missing}"
    # Negative control: the list without its line for the servers page.
    without = "\n".join(line for line in index.splitlines() if "(servers.md)" not in line)
    assert unlisted_pages(without, nav_pages()) == ["servers.md"]
