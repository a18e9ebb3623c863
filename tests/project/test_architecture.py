"""The house's rules that the import-linter contracts (pyproject.toml, run by .ci/run) cannot say: no import cycle
anywhere in the package, a package's ``__init__`` included, and no module importing another module's private names.
Each rule is a function run on the real package and, as a negative control, on a small package that breaks it."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "pytest_genguard"


def import_cycles(package: str) -> list[list[str]]:
    """For every direct import a -> b inside `package` (function-local and type-checking imports included) that b
    reaches back to a, the cycle b -> ... -> a -> b."""
    graph = grimp.build_graph(package, cache_dir=None)
    cycles = []
    for importer in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            back = graph.find_shortest_chain(importer=imported, imported=importer)
            if back is not None:
                cycles.append([*back, imported])
    return cycles


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def private_imports(package_dir: Path) -> list[str]:
    """``module: imports name`` for every import of another module's private (``_x``) name, and every import of a
    private module from outside the package that holds it (``pkg._helpers`` is for ``pkg``'s own modules)."""
    root = package_dir.parent
    found = []
    for path in sorted(package_dir.rglob("*.py")):
        module = _module_name(path, root)
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                not isinstance(node, ast.ImportFrom)
                or node.level
                or not (node.module or "").startswith(package_dir.name)
            ):
                continue
            source = node.module or ""
            private_modules = [p for p in source.split(".") if p.startswith("_") and p != "__init__"]
            if private_modules and source.rpartition(".")[0] != package:
                found.append(f"{module}: imports the private module {source}")
            for alias in node.names:
                if alias.name.startswith("_") and source != module:
                    found.append(f"{module}: imports {source}.{alias.name}")
    return found


def test_the_package_has_no_import_cycle() -> None:
    assert import_cycles(PACKAGE) == []


def test_no_module_imports_another_modules_private_names() -> None:
    assert private_imports(ROOT / PACKAGE) == []


@pytest.fixture
def broken_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A package with a cycle through a function-local import, a private name imported across modules, and a
    private module imported from outside its package."""
    pkg = tmp_path / "housebroken"
    (pkg / "inner").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "inner" / "__init__.py").write_text("")
    (pkg / "inner" / "_helpers.py").write_text("def helper():\n    return 1\n")
    (pkg / "a.py").write_text("from housebroken.b import _secret\n\ndef f():\n    return _secret\n")
    (pkg / "b.py").write_text("_secret = 1\n\ndef g():\n    from housebroken import a\n    return a\n")
    (pkg / "c.py").write_text("from housebroken.inner._helpers import helper\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "housebroken", raising=False)
    return str(pkg)


def test_the_checks_catch_a_cycle_and_private_imports(broken_package: str) -> None:
    cycles = {tuple(c) for c in import_cycles("housebroken")}
    assert cycles == {
        ("housebroken.a", "housebroken.b", "housebroken.a"),
        ("housebroken.b", "housebroken.a", "housebroken.b"),
    }
    assert private_imports(Path(broken_package)) == [
        "housebroken.a: imports housebroken.b._secret",
        "housebroken.c: imports the private module housebroken.inner._helpers",
    ]
