"""Importing the plugin stays cheap: pytest loads it in every project where it is installed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pytest_genguard.core.history import Checkpoint, history_to_json
from pytest_genguard.core.trace import GenerationTrace, ModelFingerprint, PromptTrace, Step, TokenizerFingerprint

HEAVY = ("torch", "transformers", "tokenizers", "syrupy", "hypothesis", "numpy")


@pytest.mark.parametrize("module", ["pytest_genguard", "pytest_genguard.plugin"])
def test_importing_the_plugin_imports_no_torch_or_transformers(module: str) -> None:
    code = f"import sys, {module}; print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"import {module} pulled in: {out.stdout.strip()}"


def test_the_data_core_imports_no_torch() -> None:
    code = (
        "import sys, pytest_genguard.core.trace, pytest_genguard.core.compare, pytest_genguard.core.comparison, "
        "pytest_genguard.core.history;"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def _history_file(path: Path) -> Path:
    step = Step(5, " fox", -0.1, -0.1, (5, 6), (-0.1, -3.0), -0.1)
    trace = GenerationTrace(
        prompts=(PromptTrace("the quick", (1, 2), (step,), "length"),),
        settings={"max_new_tokens": 1, "mode": "greedy"},
        model=ModelFingerprint("gpt2", "c" * 64, "a" * 64, 1000, "float32"),
        tokenizer=TokenizerFingerprint("tiny", 512, "t" * 64),
        environment={"device": "cpu"},
    )
    checkpoints = [Checkpoint(10, 0.5, 2.5, "step", trace), Checkpoint(20, 1.0, 0.5, "evaluate", trace)]
    path.write_text(history_to_json(checkpoints), encoding="utf-8")
    return path


@pytest.mark.parametrize("command", ["show", "diff"])
def test_genguard_show_and_diff_of_a_recorder_history_import_no_torch_or_transformers(
    command: str, tmp_path: Path
) -> None:
    """A history is read by the torch-free history module: `genguard show` took 3 s importing transformers before."""
    history = str(_history_file(tmp_path / "history.genguard"))
    files = [history] if command == "show" else [history, history]
    code = (
        "import sys; from pytest_genguard.cli import main; "
        f"rc = main([{command!r}, *{files!r}]); "
        "print('heavy:' + ','.join(m for m in ('torch', 'transformers') if m in sys.modules), rc)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "step 10, step" in out.stdout  # the history was really read
    assert out.stdout.splitlines()[-1] == "heavy: 0", f"genguard {command} pulled in: {out.stdout.splitlines()[-1]}"


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


def test_the_training_warning_resolves_for_w_error_without_importing_transformers(pytester: pytest.Pytester) -> None:
    """`-W error::pytest_genguard.GenguardTrainingWarning` (or a filterwarnings entry) turns the recorder's alarm into a
    failure; resolving the name must not cost a transformers import in every run."""
    pytester.makepyfile(
        """
        import sys, warnings
        import pytest_genguard

        def test_alarm():
            assert "transformers" not in sys.modules
            warnings.warn("the model loops", pytest_genguard.GenguardTrainingWarning)
        """
    )
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-W", "error::pytest_genguard.GenguardTrainingWarning"
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*GenguardTrainingWarning: the model loops*"])


def test_a_submodule_import_binds_the_module_while_the_package_attribute_stays_the_function() -> None:
    """No module-class shim: `record`, `compare`, `verify` and `finetune` are functions of the package, and the modules
    that define them live in the tiers, under other names."""
    import types

    import pytest_genguard
    import pytest_genguard.core.compare as compare_module
    import pytest_genguard.hf.record as record_module

    assert type(sys.modules["pytest_genguard"]) is types.ModuleType
    assert isinstance(record_module, types.ModuleType) and record_module.__name__ == "pytest_genguard.hf.record"
    assert pytest_genguard.record is record_module.record
    assert pytest_genguard.compare is compare_module.compare


def test_the_type_checking_imports_name_the_exports_and_their_modules() -> None:
    # `_EXPORTS` is the one list of the public API (`__all__` is derived from it); type checkers cannot read a
    # dict, so the package repeats it as `TYPE_CHECKING` imports, and this keeps the two the same.
    import ast

    import pytest_genguard

    tree = ast.parse(Path(pytest_genguard.__file__).read_text(encoding="utf-8"))
    block = next(node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    imported: dict[str, str] = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom) and node.module is not None
        for alias in node.names:
            assert alias.asname == alias.name, f"write `{alias.name} as {alias.name}` (an explicit re-export)"
            imported[alias.name] = node.module.removeprefix("pytest_genguard").removeprefix(".")
    assert imported == pytest_genguard._EXPORTS
    assert pytest_genguard.__all__ == sorted([*pytest_genguard._EXPORTS, "__version__"])
