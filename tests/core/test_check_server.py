"""`genguard check-server` on recorded responses of a real vLLM server (replayed over loopback), in the virtualenv
without torch or transformers that runs tests/core: the HTTP side needs neither."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
from replay_server import RESPONSES, Replay, Reply, recorded, serving

from pytest_genguard import cli
from pytest_genguard.core.trace import GenerationTrace


def _snapshot(folder: Path) -> Path:
    """The first prompt of the recorded snapshot (the one the responses answer), as a .genguard file."""
    trace = GenerationTrace.from_json((RESPONSES / "snapshot.genguard").read_text(encoding="utf-8"))
    path = folder / "__snapshots__" / "test_served.genguard"
    path.parent.mkdir(parents=True)
    path.write_text(dataclasses.replace(trace, prompts=trace.prompts[:1]).to_json(), encoding="utf-8")
    return path


def _replay() -> Replay:
    r = Replay()
    for name in ("version", "models", "tokenize", "score"):
        r.add(name)
    return r


def test_check_server_passes_a_snapshot_the_server_holds_and_reports_the_drift(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _snapshot(tmp_path)
    with serving(_replay()) as r:
        assert cli.main(["check-server", r.url, str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "WITHIN_TOLERANCE" in out or "IDENTICAL" in out
    assert "worst drift" in out and "dtype float32 (inferred" in out


def test_check_server_exit_codes_for_regression_stale_and_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _snapshot(tmp_path)
    moved = recorded("score")["body"]
    for entry in moved["choices"][0]["prompt_logprobs"][1:]:
        for value in entry.values():
            value["logprob"] -= 0.05
    r = _replay()
    r.routes[("POST", "/v1/completions")] = Reply(200, moved)
    with serving(r):
        assert cli.main(["check-server", r.url, str(path)]) == 1
    tokens = [*recorded("tokenize")["body"]["tokens"]]
    tokens[0] += 1
    r = _replay()
    r.routes[("POST", "/tokenize")] = Reply(200, {**recorded("tokenize")["body"], "tokens": tokens})
    with serving(r):
        assert cli.main(["check-server", r.url, str(path)]) == 3
    with serving(_replay()) as r:
        assert cli.main(["check-server", r.url, str(path), "--model", "nope"]) == 2
    assert "is not served" in capsys.readouterr().err
    assert cli.main(["check-server", r.url, str(path)]) == 2  # the server has stopped
    assert "cannot reach the server" in capsys.readouterr().err
    assert cli.main(["check-server", "localhost:8000", str(path)]) == 2
    assert cli.main(["check-server", "http://127.0.0.1:9", str(tmp_path / "missing.genguard")]) == 2


def test_check_server_runs_without_torch_or_transformers(tmp_path: Path) -> None:
    path = _snapshot(tmp_path)
    with serving(_replay()) as r:
        code = (
            "import sys\n"
            "from pytest_genguard import cli\n"
            f"rc = cli.main(['check-server', {r.url!r}, {str(path)!r}])\n"
            "heavy = sorted(m for m in ('torch', 'transformers', 'numpy') if m in sys.modules)\n"
            "print('HEAVY', heavy)\n"
            "sys.exit(rc)\n"
        )
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "HEAVY []" in result.stdout


def test_the_console_script_has_the_check_server_command() -> None:
    parser = cli.build_parser()
    args = parser.parse_args(["check-server", "http://127.0.0.1:8000", "a.genguard", "--model", "m"])
    assert (args.command, args.url, args.model) == ("check-server", "http://127.0.0.1:8000", "m")
