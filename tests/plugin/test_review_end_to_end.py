"""Reviewing a model change end to end, as a team meets it (issue 63's "Done when"): a project in its own git
repository with three recorded snapshots of a tiny llama, retrained (another seed). The plain run fails all three
and leaves the tree as committed; `genguard review --list` names the three and where each changed; on a real
pseudo-terminal `a` accepts, `s` skips and `q` quits; `--accept ID` writes exactly that snapshot and its test then
passes; `--reject-all` leaves nothing pending; the job summary names the failed tests and the HTML report draws a
picture per prompt. The inner pytest runs are in process (torch is loaded out here), the review on the terminal is
the console script in a subprocess."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch  # noqa: F401  # the inner runs are in process: torch must be loaded here first
from snapshot_support import run

import pytest_genguard
from pytest_genguard import cli
from pytest_genguard.core.pending import Pending, PendingStore

TESTS = """
import os

import pytest

import pytest_genguard

PROMPTS = {
    "test_greeting": ["hello there", "good morning"],
    "test_list": ["one two three"],
    "test_story": ["once upon a time", "the quick brown fox"],
}


@pytest.fixture(scope="module")
def model():
    return pytest_genguard.tiny_model("llama", seed=int(os.environ["TEAM_MODEL_SEED"]))  # the team's retraining


@pytest.fixture(scope="module")
def tokenizer():
    return pytest_genguard.tiny_tokenizer()


@pytest.mark.parametrize("name", sorted(PROMPTS))
def test_generation(name, model, tokenizer, genguard_snapshot):
    trace = pytest_genguard.record(model, tokenizer, PROMPTS[name], max_new_tokens=6)
    assert trace == genguard_snapshot
"""
IDS = [f"test_gen.py::test_generation[{name}]" for name in ("test_greeting", "test_list", "test_story")]
PROMPTS = 5


@pytest.fixture(scope="module", autouse=True)
def _warm() -> None:
    """Load what recording needs in this process first (pytester's in-process runs drop what they import)."""
    pytest_genguard.record(
        pytest_genguard.tiny_model("llama"), pytest_genguard.tiny_tokenizer(), ["a"], max_new_tokens=1
    )


def git(folder: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=folder, capture_output=True, text=True, check=True)
    return done.stdout


def review(folder: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    monkeypatch.chdir(folder)
    return cli.main(["review", *args])


def pending(folder: Path) -> dict[str, Pending]:
    return {e.test: e for e in PendingStore(folder).entries() if isinstance(e, Pending)}


class Terminal:
    """`genguard review` on a pseudo-terminal: keys in, the screen out."""

    def __init__(self, folder: Path) -> None:
        self.master, slave = pty.openpty()
        env = {**os.environ, "COLUMNS": "160", "TERM": "xterm", "NO_COLOR": "1"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "pytest_genguard.cli", "review"],
            cwd=folder,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            start_new_session=True,
        )
        os.close(slave)
        self.screen = b""

    def wait_for(self, text: str, timeout: float = 60.0) -> None:
        end = time.monotonic() + timeout
        while text.encode() not in self.screen:
            assert time.monotonic() < end, f"{text!r} never shown; the screen:\n{self.screen.decode(errors='replace')}"
            ready, _, _ = select.select([self.master], [], [], 0.2)
            if ready:
                try:
                    self.screen += os.read(self.master, 65536)
                except OSError:  # the review ended and closed the terminal
                    break

    def press(self, key: str, then: str) -> None:
        os.write(self.master, key.encode())
        self.wait_for(then)

    def close(self) -> int:
        code = self.process.wait(timeout=60)
        os.close(self.master)
        return code


def test_a_model_change_is_reviewed_accepted_and_rejected_without_running_the_model_again(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path_factory: pytest.TempPathFactory,
    capsys: pytest.CaptureFixture[str],
) -> None:
    project = pytester.path
    pytester.makepyfile(test_gen=TESTS)
    monkeypatch.setenv("TEAM_MODEL_SEED", "0")
    run(pytester, "--snapshot-update").assert_outcomes(passed=3)
    git(project, "init", "-q")
    git(project, "add", "-A")
    git(project, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "three snapshots")

    # the retrained model: every snapshot fails, nothing in the tree changes
    monkeypatch.setenv("TEAM_MODEL_SEED", "1")
    out = tmp_path_factory.mktemp("ci")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(out / "summary.md"))
    result = run(pytester, "--genguard-report", str(out / "report.html"))
    result.assert_outcomes(failed=3)
    assert git(project, "status", "--porcelain", "--untracked-files=all") == ""
    markdown = (out / "summary.md").read_text(encoding="utf-8")
    assert markdown.startswith("## genguard: 3 of 3 checks failed")
    for nodeid in IDS:
        assert f"| `{nodeid}` | stale | prompt " in markdown
    report = (out / "report.html").read_text(encoding="utf-8")
    assert report.count('<svg class="chart"') == PROMPTS

    # the list names the three and where each changed
    capsys.readouterr()
    assert review(project, monkeypatch, "--list") == 0
    listed = capsys.readouterr().out.splitlines()
    kept = pending(project)
    assert sorted(kept) == IDS
    for nodeid in IDS:
        (line,) = [line for line in listed if f"  {nodeid}  " in line]
        assert line.startswith(kept[nodeid].id) and "stale: " in line and "first at prompt " in line

    # on a terminal: accept the first, skip the second, quit at the third
    terminal = Terminal(project)
    terminal.wait_for("[q] quit")
    assert "[1/3] " + IDS[0] in terminal.screen.decode()
    terminal.press("a", "[2/3] " + IDS[1])
    terminal.press("s", "[3/3] " + IDS[2])
    terminal.press("q", "still pending")
    assert terminal.close() == 0
    assert "accepted 1, rejected 0, skipped 1; 2 traces still pending" in terminal.screen.decode()
    assert git(project, "status", "--porcelain").splitlines() == [f" M {kept[IDS[0]].file}"]

    # --accept ID writes exactly that snapshot, and its test passes
    assert review(project, monkeypatch, "--accept", kept[IDS[2]].id) == 0
    changed = sorted(line[3:] for line in git(project, "status", "--porcelain").splitlines())
    assert changed == sorted([kept[IDS[0]].file, kept[IDS[2]].file])
    run(pytester, IDS[0], IDS[2]).assert_outcomes(passed=2)

    # --reject-all: nothing pending, the skipped snapshot as committed
    assert review(project, monkeypatch, "--reject-all") == 0
    assert pending(project) == {}
    assert git(project, "diff", "--name-only", kept[IDS[1]].file) == ""
    run(pytester, IDS[1]).assert_outcomes(failed=1)  # still the old model's snapshot
