"""`genguard show` and `genguard diff` import what reading and comparing traces needs, and no other subcommand's
module: not the HTTP side, the engines, the torch side or genguard bisect (the console script imported all 58 of
genguard's modules before `show` read its one file). Counted in a fresh interpreter, as the console script starts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = ROOT / "examples" / "__snapshots__" / "test_decoding" / "test_greedy_path.genguard"
HEAVY = ("pytest_genguard.engines", "pytest_genguard.serving", "pytest_genguard.hf", "pytest_genguard.bisection")
THIRD_PARTY = ("torch", "transformers", "numpy")
BUDGET = 25
"""The most project modules `genguard show` or `diff` may import: the core they use (23 and 22 today), the console
script's package and the subcommand's module."""

_CHILD = """
import contextlib, io, json, sys
from pytest_genguard import cli
argv, full = json.loads(sys.argv[1])
if full:  # every subcommand's module imported, as the console script did before it imported them on demand
    cli.build_parser(full=True)
with contextlib.redirect_stdout(io.StringIO()):
    code = cli.main(argv)
modules = sorted(m for m in sys.modules if m == "pytest_genguard" or m.startswith("pytest_genguard."))
print(json.dumps([code, modules, [m for m in sys.argv[2:] if m in sys.modules]]))
"""


def imported(argv: list[str], *, full: bool = False) -> tuple[int, list[str], list[str]]:
    """The exit code of `genguard ARGV` in a fresh interpreter, genguard's modules it imported, and which of
    `THIRD_PARTY` it imported."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps([argv, full]), *THIRD_PARTY],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    code, modules, third = json.loads(done.stdout.strip().splitlines()[-1])
    return code, modules, third


def problems(modules: list[str], third: list[str], command: str, budget: int = BUDGET) -> list[str]:
    """What `genguard COMMAND` imported beyond what reading traces needs (at most `budget` project modules)."""
    found = [m for m in modules if m.startswith(HEAVY)] + third
    others = [m for m in modules if m.startswith("pytest_genguard.cli.") and m not in _allowed(command)]
    found += others
    if len(modules) > budget:
        found.append(f"{len(modules)} project modules (at most {budget})")
    return found


def _allowed(command: str) -> set[str]:
    return {"pytest_genguard.cli.inputs", f"pytest_genguard.cli.{command}"}


@pytest.mark.parametrize(
    ("command", "argv"),
    [("show", ["show", str(SNAPSHOT)]), ("diff", ["diff", str(SNAPSHOT), str(SNAPSHOT)])],
    ids=["show", "diff"],
)
def test_show_and_diff_import_the_core_and_their_own_module_only(command: str, argv: list[str]) -> None:
    code, modules, third = imported(argv)
    assert code == 0
    assert f"pytest_genguard.cli.{command}" in modules  # the subcommand ran
    assert not problems(modules, third, command), f"genguard {command} imported {problems(modules, third, command)}"


REVIEW_BUDGET = 28
"""`genguard review --list`: the core that reads and compares traces (27 today: the pending store, what a change
did), the console script's package and its own module; not its terminal screen, nor rich."""


def test_review_list_imports_the_core_and_its_own_module_only() -> None:
    code, modules, third = imported(["review", "--list"])
    assert code == 0
    assert "pytest_genguard.cli.review" in modules and "pytest_genguard.cli.review_screen" not in modules
    found = problems(modules, third, "review", REVIEW_BUDGET)
    assert not found, f"genguard review --list imported {found}"


def test_the_import_check_sees_every_subcommand_imported_at_start() -> None:
    # Negative control: the console script as it was (every subcommand's module imported first) fails the check,
    # naming the HTTP side, the engines and the count.
    code, modules, third = imported(["show", str(SNAPSHOT)], full=True)
    assert code == 0
    found = problems(modules, third, "show")
    assert "pytest_genguard.serving.servers" in found and "pytest_genguard.engines.gguf_check" in found
    assert "pytest_genguard.cli.check_server" in found
    assert any(f"(at most {BUDGET})" in p for p in found), found


def test_help_lists_every_subcommand_without_importing_one(capsys: pytest.CaptureFixture[str]) -> None:
    code, modules, _ = imported(["--help"])
    assert code == 0
    assert [m for m in modules if m.startswith("pytest_genguard.cli.")] == ["pytest_genguard.cli.inputs"]
    from pytest_genguard import cli

    assert cli.main(["--help"]) == 0
    listing = " ".join(capsys.readouterr().out.split())
    for name, subcommand in cli.SUBCOMMANDS.items():
        assert f"{name} {' '.join(subcommand.help.split())}" in listing
