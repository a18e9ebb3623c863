"""The `genguard` console script: show, diff and report on trace files, with clear errors for bad input."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import trace_builder

from pytest_genguard import cli
from pytest_genguard.core.compare import compare
from pytest_genguard.core.trace import GenerationTrace, ModelFingerprint

VOCAB = {0: "<|endoftext|>", 1: " the", 2: " quick", 3: " brown", 4: " fox", 5: "\udce2\udc82", 6: " [bold]dog"}


def make_trace(
    path: list[int], *, tie_at: int | None = None, gap: float = 3.0, weights: str = "a" * 64
) -> GenerationTrace:
    """One float32 prompt; at `tie_at` the runner-up is `gap` nats behind (elsewhere 3 nats)."""
    steps = [
        trace_builder.step(
            [(tid, -0.1), (4 if tid != 4 else 3, -0.1 - (gap if i == tie_at else 3.0)), (1 if tid != 1 else 2, -6.0)],
            text=VOCAB,
        )
        for i, tid in enumerate(path)
    ]
    model = ModelFingerprint("gpt2", "c" * 64, weights, 1000, "float32")
    return trace_builder.trace(steps, prompts=["the quick"], finish=None, model=model)


def write(path: Path, trace: GenerationTrace) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(trace.to_json(), encoding="utf-8")
    return path


@pytest.fixture(autouse=True)
def plain_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)


def test_show_prints_tokens_top_k_and_margins_as_a_plain_table_when_not_a_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace_file = write(tmp_path / "t.json", make_trace([3, 6, 5, 0], tie_at=1, gap=0.0005))
    assert cli.main(["show", str(trace_file)]) == 0
    out = capsys.readouterr().out
    assert "\x1b[" not in out
    assert "'the quick'" in out and "gpt2/aaaaaaaaaaaa (float32)" in out
    dog = next(line for line in out.splitlines() if "[bold]dog" in line)  # rich markup in a token stays text
    assert "0.0005 *" in dog  # the fragile margin is flagged
    assert "\\xe2\\x82" in out  # bytes of an incomplete character, never a lone surrogate
    assert f"{100 * math.exp(-0.1):.1f}%" in out
    assert "1 fragile steps" in out


def test_show_uses_colour_on_a_terminal_and_none_with_no_color(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    trace_file = write(tmp_path / "t.json", make_trace([3, 0]))
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert cli.main(["show", str(trace_file)]) == 0
    assert "\x1b[" in capsys.readouterr().out
    monkeypatch.setenv("NO_COLOR", "1")
    assert cli.main(["show", str(trace_file)]) == 0
    assert "\x1b[" not in capsys.readouterr().out


def test_show_limits_prompts_and_alternatives_on_request(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace_file = write(tmp_path / "t.json", make_trace([3, 0]))
    assert cli.main(["show", str(trace_file), "--top", "1"]) == 0
    assert "#1" not in capsys.readouterr().out  # the third candidate (id 1) is cut
    assert cli.main(["show", str(trace_file), "--prompt", "3"]) == 2
    assert "--prompt 3: " in capsys.readouterr().err


def test_diff_exits_0_and_says_identical_for_the_same_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = write(tmp_path / "a.json", make_trace([3, 4, 0]))
    b = write(tmp_path / "b.json", make_trace([3, 4, 0]))
    assert cli.main(["diff", str(a), str(b)]) == 0
    assert "identical (1 prompt, 3 steps, bitwise)" in capsys.readouterr().out


def test_diff_exits_1_with_the_pytest_failure_message_on_a_regression(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    expected, actual = make_trace([3, 4, 1, 0]), make_trace([3, 5, 1, 0])
    a, b = write(tmp_path / "a.json", expected), write(tmp_path / "b.json", actual)
    assert cli.main(["diff", str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert str(compare(expected, actual)) in out
    assert "regression: prompt 0 'the quick' diverges at step 1" in out


def test_diff_tolerances_decide_whether_a_near_tie_holds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = write(tmp_path / "a.json", make_trace([3, 4, 0], tie_at=1, gap=0.0005))
    b = write(tmp_path / "b.json", make_trace([3, 3, 0], tie_at=1, gap=0.0005))
    assert cli.main(["diff", str(a), str(b)]) == 0  # float32 tie_tol 1e-3 tolerates a 5e-4 gap
    assert "tolerated divergence" in capsys.readouterr().out
    assert cli.main(["diff", str(a), str(b), "--tie-tol", "1e-4"]) == 1
    assert "regression" in capsys.readouterr().out


def test_diff_reports_a_changed_model_as_stale(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = write(tmp_path / "a.json", make_trace([3, 4, 0]))
    b = write(tmp_path / "b.json", make_trace([3, 4, 0], weights="b" * 64))
    assert cli.main(["diff", str(a), str(b)]) == 1
    assert capsys.readouterr().out.splitlines()[1].startswith("stale: model changed")
    assert cli.main(["diff", str(a), str(b), "--ignore-fingerprints"]) == 0


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"schema": 1, "prompts": [', "not valid JSON"),
        (b'{"schema": 2, "prompts": []}', "trace schema 2 is not supported"),
        (b'{"schema": 1, "prompts": [{"prompt": "x"}]}', "prompts[0]: missing key"),
        (b"\xff\xfe{}", "not UTF-8 text"),
    ],
)
def test_a_bad_trace_file_is_named_with_the_fix_and_exit_code_2_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, message: str
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    good = write(tmp_path / "good.json", make_trace([3, 0]))
    for argv in (["show", str(bad)], ["diff", str(good), str(bad)]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert str(bad) in err and message in err
        assert "Traceback" not in err


def test_missing_files_folders_and_bad_arguments_exit_2_with_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["show", str(tmp_path / "nope.json")]) == 2
    assert "nope.json: no such file" in capsys.readouterr().err
    assert cli.main(["show", str(tmp_path)]) == 2
    assert "genguard report DIR" in capsys.readouterr().err
    assert cli.main(["diff", "a.json"]) == 2
    assert "required: ACTUAL" in capsys.readouterr().err
    assert cli.main(["diff", "a.json", "b.json", "--rtol", "lots"]) == 2
    assert "'lots' is not a number" in capsys.readouterr().err
    assert cli.main([]) == 2
    assert cli.main(["--help"]) == 0
    assert "show" in capsys.readouterr().out


def test_report_renders_every_trace_under_a_folder_with_its_path(tmp_path: Path) -> None:
    snapshots = tmp_path / "__snapshots__"
    write(snapshots / "test_decoding" / "test_greedy.json", make_trace([3, 4, 0]))
    write(snapshots / "test_decoding" / "test_sampled.json", make_trace([4, 3, 0]))
    (snapshots / "notes.txt").write_text("not a trace")
    out = tmp_path / "out" / "report.html"
    assert cli.main(["report", str(snapshots), "-o", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    assert "test_decoding/test_greedy.json" in page and "test_decoding/test_sampled.json" in page
    assert "notes.txt" not in page
    assert "2 trace files under" in page


def test_report_lists_an_unreadable_trace_and_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "snaps" / "good.json", make_trace([3, 0]))
    (tmp_path / "snaps" / "broken.json").write_text('{"schema": 1, "prompts": [}')
    out = tmp_path / "r.html"
    assert cli.main(["report", str(tmp_path / "snaps"), "-o", str(out)]) == 2
    assert "broken.json: not valid JSON" in capsys.readouterr().err
    page = out.read_text(encoding="utf-8")
    assert "good.json" in page and "not valid JSON" in page


def test_report_on_a_folder_without_traces_or_a_missing_folder_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["report", str(tmp_path), "-o", str(tmp_path / "r.html")]) == 2
    assert "no trace files found" in capsys.readouterr().err
    assert cli.main(["report", str(tmp_path / "missing"), "-o", str(tmp_path / "r.html")]) == 2
    assert "no such folder" in capsys.readouterr().err
    assert not (tmp_path / "r.html").exists()


def test_the_installed_console_script_passes_the_exit_code_through(tmp_path: Path) -> None:
    a = write(tmp_path / "a.json", make_trace([3, 4, 0]))
    b = write(tmp_path / "b.json", make_trace([3, 5, 0]))
    script = Path(sys.executable).with_name("genguard")
    argv = [str(script)] if script.exists() else [sys.executable, "-m", "pytest_genguard.cli"]
    env = {**os.environ, "NO_COLOR": "1"}
    done = subprocess.run([*argv, "diff", str(a), str(b)], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines()[1].startswith("regression: prompt 0")


FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def test_show_and_diff_read_the_shared_reference_trace(capsys: pytest.CaptureFixture[str]) -> None:
    reference = FIXTURES / "reference" / "greedy_small.json"
    assert cli.main(["show", str(reference)]) == 0
    assert "prompt 0: 'the quick'" in capsys.readouterr().out
    assert cli.main(["diff", str(reference), str(reference)]) == 0


@pytest.mark.parametrize("name", sorted(p.name for p in (FIXTURES / "corrupt").glob("*.json")))
def test_every_shared_corrupt_trace_exits_2_naming_the_file(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    corrupt = FIXTURES / "corrupt" / name
    assert cli.main(["show", str(corrupt)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"genguard show: {corrupt}: ") and "Traceback" not in err


def test_recorder_histories_are_shown_diffed_and_reported_checkpoint_by_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_genguard.core.history import Checkpoint, history_to_json

    def history(last: list[int]) -> str:
        return history_to_json(
            [
                Checkpoint(step=10, epoch=0.5, loss=2.5, event="step", trace=make_trace([3, 4, 1, 1])),
                Checkpoint(step=20, epoch=1.0, loss=0.25, event="train_end", trace=make_trace(last)),
            ]
        )

    (tmp_path / "snaps").mkdir()
    old = tmp_path / "snaps" / "test_training.genguard"
    old.write_text(history([3, 4, 0]), encoding="utf-8")
    new = tmp_path / "new.genguard"
    new.write_text(history([3, 5, 0]), encoding="utf-8")
    assert cli.main(["show", str(old)]) == 0
    out = capsys.readouterr().out
    assert "checkpoint 0: step 10, step, loss 2.5" in out and "checkpoint 1: step 20, train_end, loss 0.25" in out
    assert cli.main(["diff", str(old), str(new)]) == 1
    assert "regression: 2 checkpoints, worst at checkpoint 1 (step 20, train_end)" in capsys.readouterr().out
    assert cli.main(["diff", str(old), str(FIXTURES / "reference" / "greedy_small.json")]) == 2
    assert "is a recorder history but" in capsys.readouterr().err
    assert cli.main(["report", str(tmp_path / "snaps"), "-o", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "test_training.genguard" in page and "checkpoint 1: step 20, train_end, loss 0.25" in page


def test_show_names_alternatives_by_the_token_texts_the_file_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: alternatives no step chose printed as "#4" though the file has their "token_texts" (issue 33).
    trace = make_trace([3, 2, 0])  # " fox" (4) and " the" (1) are alternatives only
    assert trace.token_text(4) is None
    named = GenerationTrace.from_json(
        trace_builder.trace(
            list(trace.prompts[0].steps), prompts=["the quick"], finish=None, token_texts={4: " fox", 1: " the"}
        ).to_json()
    )
    assert cli.main(["show", str(write(tmp_path / "t.json", named))]) == 0
    out = capsys.readouterr().out
    assert "#4" not in out and "#1" not in out
    assert "fox 4.5%" in out
    assert cli.main(["show", str(write(tmp_path / "u.json", trace))]) == 0
    assert "#4" in capsys.readouterr().out  # negative control: without the texts the id is all there is
