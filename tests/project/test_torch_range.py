"""The declared torch range and the CI legs that test its ends say the same thing: `.ci/run` installs exactly
pyproject.toml's floor, and both ends run the examples."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def torch_floor(pyproject: str) -> str:
    """The version in pyproject.toml's `torch>=X` requirement."""
    deps = tomllib.loads(pyproject)["project"]["dependencies"]
    floors = [m.group(1) for d in deps if (m := re.fullmatch(r"torch>=([\d.]+)", d.replace(" ", "")))]
    assert len(floors) == 1, f"pyproject.toml: expected one torch>=X requirement, found {deps}"
    return floors[0]


def ci_pin(ci: str, name: str) -> str:
    """The release a `NAME="torch==X"` line of .ci/run pins."""
    found = re.findall(rf'^{name}="torch==([\d.]+)"', ci, flags=re.MULTILINE)
    assert len(found) == 1, f'.ci/run: expected one {name}="torch==X" line, found {found}'
    return found[0]


def same_release(a: str, b: str) -> bool:
    """2.6 and 2.6.0 name one release."""

    def pad(v: str) -> tuple[int, ...]:
        return (*(int(p) for p in v.split(".")), 0, 0, 0)[:3]

    return pad(a) == pad(b)


def test_ci_installs_exactly_the_declared_torch_floor() -> None:
    floor = torch_floor((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert same_release(floor, ci_pin(ci, "TORCH_FLOOR")), f"pyproject.toml says torch>={floor}, .ci/run tests another"
    assert not same_release(floor, ci_pin(ci, "TORCH_NEWEST")), "the two ends of the range are one release"
    # a floor raised in one file only is caught
    assert not same_release("2.7", ci_pin(ci, "TORCH_FLOOR"))


def test_both_torch_ends_run_the_examples_and_the_torch_api_tests() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").replace("\\\n", " ")  # one line per command
    for venv in (".venv-ci-lowest", ".venv-ci-torch-newest"):
        runs = [line for line in ci.splitlines() if f"{venv}/bin/pytest" in line]
        assert any("examples" in line and "TORCH_API_TESTS" in line for line in runs), f"{venv}: {runs}"
