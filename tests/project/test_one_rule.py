"""The comparison rule has one home, `pytest_genguard.core.rule`: the rounding term of a value's allowance (a
dtype's epsilon times the step's log-sum-exp) and of a near tie is computed there alone. Before, `core/compare.py`
built it in three places and `serving/record.py` a fourth time, each reading the epsilons for itself."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pytest_genguard"
HOME = "core/rule.py"
EPSILONS = frozenset({"logprobs_epsilon", "scores_epsilon", "normalizer_bound", "rounding_epsilon"})
"""What a value's rounding term is made of (`core.environments`, `core.tolerances`)."""
DEFINED_IN = {"core/environments.py", "core/tolerances.py"}
# Tolerances' methods with their rounding argument: (name, positional arguments with it)
WITH_ROUNDING = {"allowed": 3, "close": 3, "near_tie": 2, "tie_limit": 1}


def rule_outside_its_home(source: str, where: str) -> list[str]:
    """Each place in `source` that reads a value's epsilon or passes a rounding term to a tolerance itself."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if name in EPSILONS:
            found.append(f"{where}:{node.lineno}: {name}()")
        elif isinstance(func, ast.Attribute) and len(node.args) + len(node.keywords) >= WITH_ROUNDING.get(name, 99):
            found.append(f"{where}:{node.lineno}: .{name}() with a rounding term")
    return found


def test_only_the_rules_home_computes_a_rounding_term() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        if where != HOME and where not in DEFINED_IN:
            found += rule_outside_its_home(path.read_text(encoding="utf-8"), where)
    assert not found, f"call pytest_genguard.core.rule (Rule, StepRule) instead: {found}"


def test_the_check_finds_a_closeness_computed_outside_the_rule() -> None:
    # Negative controls: serving/record.py's `_holds` as it was, and compare()'s near-tie widening as it was.
    holds = (
        "def _holds(reference, recorded, got):\n"
        "    rounding = logprobs_epsilon({}) * abs(recorded.lse or 0.0)\n"
        "    return dtype_default(reference.dtype).close(recorded.logprob, got.logprob, rounding)\n"
    )
    assert rule_outside_its_home(holds, "serving/record.py") == [
        "serving/record.py:3: .close() with a rounding term",
        "serving/record.py:2: logprobs_epsilon()",
    ]
    split = "tolerated = tol.near_tie(gap, model_eps * step_scale(e, a))\n"
    assert rule_outside_its_home(split, "core/compare.py") == ["core/compare.py:1: .near_tie() with a rounding term"]
    # A fragile step (a margin under tie_tol, no rounding term) and the html marks are the tolerances' own use.
    assert rule_outside_its_home("fragile = tol.near_tie(step.margin)\nok = tol.close(a, b)\n", "x.py") == []
