"""The benchmark scripts still run (`python -m benchmarks --smoke`: tiny sizes, no timing assertions)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "RESULTS.md"


def _stamp(path: Path) -> tuple[int, int] | None:
    return (path.stat().st_mtime_ns, path.stat().st_size) if path.exists() else None


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """`benchmarks.run`, importable from the repository root (benchmarks/ is not an installed package)."""
    monkeypatch.syspath_prepend(str(ROOT))
    from benchmarks import run

    return run


def _figure_names() -> list[str]:
    """`benchmarks.run.FIGURES`' names, read at collection (benchmarks/ is importable from the repository root)."""
    sys.path.insert(0, str(ROOT))
    try:
        from benchmarks.run import FIGURES

        return list(FIGURES)
    finally:
        sys.path.remove(str(ROOT))


ALONE = ("finetune_startup",)
"""Figures that take as long as all the others together (finetune_startup: 44 s, its own cold fine-tunes in
subprocesses): each runs by itself, the rest in one more interpreter, so pytest-xdist spreads the two over its
workers. One interpreter per figure cost each its own import of torch and transformers, about 5 s of CPU: 80 s of
the suite's time for 16 figures; run as one test, every figure in turn was the suite's last minutes on one worker."""


def _groups() -> list[tuple[str, ...]]:
    names = _figure_names()
    return [(name,) for name in ALONE] + [tuple(n for n in names if n not in ALONE)]


@pytest.mark.parametrize("figures", _groups(), ids=lambda group: group[0] if len(group) == 1 else "the-others")
def test_each_benchmark_figure_runs_at_smoke_size_and_lands_in_the_table(tmp_path: Path, figures: tuple[str]) -> None:
    # As `python -m benchmarks` runs them: the figures one after another in one interpreter.
    out = tmp_path / "RESULTS.md"
    before = _stamp(RESULTS)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "GENGUARD_"))}
    only = [arg for figure in figures for arg in ("--only", figure)]
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--smoke", *only, "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    text = out.read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| figure")]
    assert rows, text
    assert not [r for r in rows if "error:" in r], text
    statuses = [r.rstrip(" |").split(" | ")[4] for r in rows]
    assert set(statuses) <= {"met", "**missed**", "report"}, statuses
    assert set(re.findall(r"^`--only (\w+)`", text, flags=re.MULTILINE)) == set(figures), text
    assert "- CPU: " in text and "Load average" in text
    # A smoke run writes only where it was told: the published table is left alone.
    assert _stamp(RESULTS) == before


def test_the_groups_hold_every_figure_once() -> None:
    groups = _groups()
    assert sorted(n for group in groups for n in group) == sorted(_figure_names()) and len(groups) == 1 + len(ALONE)


def _boom(smoke: bool) -> list[object]:
    raise RuntimeError("this figure is broken")


def test_a_figure_that_raises_becomes_an_error_row_and_a_failing_exit_status(
    tmp_path: Path, bench: types.ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    module = types.ModuleType("genguard_bench_boom")
    module.run = _boom  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "genguard_bench_boom", module)
    monkeypatch.setitem(bench.FIGURES, "boom", ("genguard_bench_boom", "run"))
    # In-process: keep this worker's torch threads and the harness setting as they are.
    monkeypatch.setattr(bench, "_set_threads", lambda n: None)
    monkeypatch.setattr(bench.harness, "COLLECT", bench.harness.COLLECT)
    out = tmp_path / "table.md"

    assert bench.main(["--smoke", "--only", "boom", "--out", str(out)]) == 1
    assert "error: RuntimeError: this figure is broken" in out.read_text(encoding="utf-8")
    assert "this figure is broken" in capsys.readouterr().err


def test_an_unknown_figure_name_is_refused_with_the_valid_names(
    bench: types.ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        bench.main(["--only", "nope"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "nope" in err and "verify" in err and "startup" in err
