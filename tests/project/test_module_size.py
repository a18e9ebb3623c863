"""No module of the package is over 500 lines (the house rule: each module readable in one sitting). A module that
grows past it is split along its seams (as `hf/fingerprint.py` was, into the weights and tokenizer hashes)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 500


def long_modules(package: Path, limit: int = LIMIT) -> list[str]:
    """Each module under `package` longer than `limit` lines, with its length."""
    found = []
    for path in sorted(package.rglob("*.py")):
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > limit:
            found.append(f"{path.relative_to(package.parent).as_posix()}: {lines} lines")
    return found


def test_no_module_of_the_package_is_over_500_lines() -> None:
    found = long_modules(ROOT / "pytest_genguard")
    assert not found, f"split these along their seams (at most {LIMIT} lines each): {found}"


def test_the_size_check_finds_a_long_module(tmp_path: Path) -> None:
    # Negative control: a package with one module of 501 lines and one of exactly 500.
    package = tmp_path / "fake"
    (package / "sub").mkdir(parents=True)
    (package / "sub" / "long.py").write_text("x = 1\n" * (LIMIT + 1), encoding="utf-8")
    (package / "fits.py").write_text("x = 1\n" * LIMIT, encoding="utf-8")
    assert long_modules(package) == [f"fake/sub/long.py: {LIMIT + 1} lines"]
