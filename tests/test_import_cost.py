"""Importing the plugin stays cheap: pytest loads it in every project where it is installed."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("torch", "transformers", "tokenizers", "syrupy", "hypothesis", "numpy")


@pytest.mark.parametrize("module", ["pytest_genguard", "pytest_genguard.plugin"])
def test_importing_the_plugin_imports_no_torch_or_transformers(module: str) -> None:
    code = f"import sys, {module}; print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"import {module} pulled in: {out.stdout.strip()}"


def test_the_data_core_imports_no_torch() -> None:
    code = (
        "import sys, pytest_genguard.trace, pytest_genguard.compare, pytest_genguard.explain;"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_public_names_resolve_lazily_to_the_api_not_to_submodules() -> None:
    import pytest_genguard

    for name in pytest_genguard.__all__:
        value = getattr(pytest_genguard, name)
        if name not in ("strategies", "__version__"):
            assert not isinstance(value, type(sys)), f"pytest_genguard.{name} is a module, not the API object"


def test_an_unknown_attribute_raises_attribute_error() -> None:
    import pytest_genguard

    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        pytest_genguard.nope  # noqa: B018
