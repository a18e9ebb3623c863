"""pytest imports test files without `__init__.py` by basename (rootdir-relative "rootdir" import mode): two test
files of one name in different folders collide, and the whole-suite run errors ("import file mismatch") although
each folder passes on its own, as `tests/serving/test_served_model.py` and `examples/test_served_model.py` did."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def module_files(root: Path) -> dict[str, list[str]]:
    """Test module basenames under `tests/` and `examples/`, each with the files that have it."""
    found: dict[str, list[str]] = defaultdict(list)
    for top in ("tests", "examples"):
        for path in sorted((root / top).rglob("test_*.py")):
            if "__snapshots__" not in path.parts:
                found[path.name].append(str(path.relative_to(root)))
    return found


def test_no_two_test_files_share_a_basename(tmp_path: Path) -> None:
    clashes = {name: paths for name, paths in module_files(ROOT).items() if len(paths) > 1}
    assert not clashes, f"rename one of each: {clashes}"
    # negative control: a clash is found
    for folder in ("tests/a", "examples"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "test_same.py").write_text("")
    assert module_files(tmp_path)["test_same.py"] == ["tests/a/test_same.py", "examples/test_same.py"]
