"""The contributor documents stay true: CONTRIBUTING.md's module map names every module (and no line counts, which
went stale by hand), and the design it points to is in the repository."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONTRIBUTING = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")


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
