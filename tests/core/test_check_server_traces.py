"""`genguard check-server --write-trace`, `--concurrency` and `--load` on recorded responses of the real vLLM servers
(replayed over loopback): the written traces and who may be overwritten, the same traces at one request in flight
as at four, and the batch-variance report."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from replay_server import Reply, recorded, serving
from served_replay import BF16, F32, SERVED_BF16, served, snapshot_file

from pytest_genguard import cli
from pytest_genguard.core.trace import GenerationTrace


def test_written_traces_are_named_after_their_snapshots_and_read_by_every_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = snapshot_file(tmp_path / "a", "test_served.genguard")
    b = snapshot_file(tmp_path / "b", "test_served.genguard")  # the same name in another folder
    out_dir = tmp_path / "server-traces"
    with serving(served(BF16, cap=5)) as r:
        argv = ["check-server", r.url, str(a), str(b), "--budget", SERVED_BF16, "--write-trace", str(out_dir)]
        assert cli.main(argv) == 4
    out = capsys.readouterr().out
    assert f"wrote 2 server traces under {out_dir}" in out
    written_a = out_dir / "a" / "__snapshots__" / "test_served.genguard"
    written_b = out_dir / "b" / "__snapshots__" / "test_served.genguard"
    trace = GenerationTrace.from_json(written_a.read_text(encoding="utf-8"))
    assert trace.environment["server"] == r.url and trace.environment["dtype"] == "bfloat16"
    assert written_b.exists()
    # the same verdict, and the same figures, from the written file alone
    assert cli.main(["fidelity", str(a), str(written_a), "--budget", SERVED_BF16]) == 4
    assert "KLD mean 0.0002588" in capsys.readouterr().out
    assert cli.main(["fidelity", str(a), str(written_a), "--budget", "kld_mean=2e-4"]) == 1
    assert cli.main(["show", str(written_a)]) == 0
    assert "served_model=" in capsys.readouterr().out
    assert cli.main(["diff", str(a), str(written_a)]) == 1  # the float rule: a dtype switch
    assert "bfloat16" in capsys.readouterr().out
    assert cli.main(["report", str(out_dir), "-o", str(tmp_path / "r.html")]) == 0
    assert "wrote" in capsys.readouterr().out and "bfloat16" in (tmp_path / "r.html").read_text(encoding="utf-8")


def test_a_file_genguard_did_not_write_is_never_overwritten(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = snapshot_file(tmp_path)
    out_dir = tmp_path / "out"
    with serving(served(F32, cap=5)) as r:
        # first run writes; a second replaces its own output
        assert cli.main(["check-server", r.url, str(path), "--write-trace", str(out_dir)]) == 0
        assert cli.main(["check-server", r.url, str(path), "--write-trace", str(out_dir)]) == 0
        capsys.readouterr()
        mine = out_dir / path.name
        mine.write_text("my notes\n", encoding="utf-8")  # the user's file now
        before = len(r.requests)
        assert cli.main(["check-server", r.url, str(path), "--write-trace", str(out_dir)]) == 2
        err = capsys.readouterr().err
        assert f"{mine} exists and is not a server trace genguard wrote; it is never overwritten" in err
        assert len(r.requests) == before  # refused before asking the server
        assert mine.read_text(encoding="utf-8") == "my notes\n"
        # DIR = the snapshots' own folder: the snapshot itself would be replaced
        assert cli.main(["check-server", r.url, str(path), "--write-trace", str(path.parent)]) == 2
        assert "is a snapshot being judged" in capsys.readouterr().err


def _in_flight(score: dict[str, Any], delay: float) -> tuple[Any, dict[str, int]]:
    """A replayed server that answers scoring requests after `delay` and counts the most requests in flight."""
    r = served(score, cap=5)
    lock = threading.Lock()
    seen = {"now": 0, "most": 0}
    complete = r.routes[("POST", "/v1/completions")]
    assert callable(complete)

    def slow(body: Any) -> Reply:
        with lock:
            seen["now"] += 1
            seen["most"] = max(seen["most"], seen["now"])
        time.sleep(delay)
        with lock:
            seen["now"] -= 1
        return complete(body)

    r.routes[("POST", "/v1/completions")] = slow
    return r, seen


def test_four_requests_in_flight_give_the_same_traces_and_verdicts_as_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = [snapshot_file(tmp_path / "snaps", f"test_{i}.genguard") for i in range(8)]
    outputs = {}
    r, seen = _in_flight(BF16, 0.2)
    with serving(r):  # one server for both runs: its URL is in the traces
        for n in (1, 4):
            seen["most"] = 0
            argv = ["check-server", r.url, *map(str, paths), "--budget", SERVED_BF16, "--concurrency", str(n)]
            assert cli.main([*argv, "--write-trace", str(tmp_path / f"n{n}")]) == 4
            lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("UNPROVEN")]
            assert [line.split()[1] for line in lines] == [f"{p}:" for p in paths]  # in the order given
            outputs[n] = (lines, {p.name: (tmp_path / f"n{n}" / p.name).read_bytes() for p in paths})
            assert seen["most"] == n  # one at a time, or four at once
    assert outputs[1][0] == outputs[4][0]
    assert outputs[1][1] == outputs[4][1]  # byte-identical server traces


def test_a_concurrency_below_one_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = snapshot_file(tmp_path)
    assert cli.main(["check-server", "http://127.0.0.1:9", str(path), "--concurrency", "0"]) == 2
    assert "argument --concurrency: '0' must be at least 1" in capsys.readouterr().err


def test_load_reports_the_batch_variance_per_snapshot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = [snapshot_file(tmp_path, f"test_{i}.genguard") for i in range(2)]
    with serving(served(F32, cap=5)) as r:
        assert cli.main(["check-server", r.url, *map(str, paths), "--load", "--concurrency", "2"]) == 0
    out = capsys.readouterr().out
    for path in paths:
        assert f"load {path}: no batch variance: 4 runs under load (prefix cache warm), 12 steps each" in out
    generated = [body for _, route, body in r.requests if route == "/v1/completions" and "logprobs" in body]
    assert sorted(len(body["prompt"]) for body in generated) == [3, 3, 3, 3, 17, 17, 17, 17, 40, 40, 40, 40]


def test_load_names_the_steps_that_moved_under_load(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the negative control: a server whose values alternate between calls (as a batch-variant kernel's do)
    path = snapshot_file(tmp_path)
    r = served(F32, cap=5)
    calls = {"n": 0}

    def alternating(body: Any) -> Reply:
        if "prompt_logprobs" not in body:
            return Reply(200, recorded("generate")["body"])
        calls["n"] += 1
        return Reply(200, BF16 if calls["n"] % 2 == 0 else F32)

    r.routes[("POST", "/v1/completions")] = alternating
    with serving(r):
        cli.main(["check-server", r.url, str(path), "--load", "--concurrency", "2"])
    out = capsys.readouterr().out
    assert f"load {path}: batch variance: " in out and "steps moved under load" in out


def test_a_write_trace_folder_that_cannot_be_written_is_bad_input_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = snapshot_file(tmp_path)
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder\n", encoding="utf-8")
    with serving(served(F32, cap=5)) as r:
        assert cli.main(["check-server", r.url, str(path), "--write-trace", str(blocked / "traces")]) == 2
    assert f"--write-trace {blocked / 'traces'}: cannot write" in capsys.readouterr().err


def test_a_closed_pipe_ends_the_output_quietly(tmp_path: Path) -> None:
    # `genguard check-server ... | head -1`: no error naming --write-trace, which was never asked for
    path = snapshot_file(tmp_path)  # its folder, copied: more lines than a pipe holds (64 KiB), so head closes it
    for i in range(400):
        shutil.copy(path, path.with_name(f"copy_{i}.genguard"))
    with serving(served(F32, cap=5)) as r:
        done = subprocess.run(
            f"{sys.executable} -m pytest_genguard.cli check-server {r.url} {path.parent} | head -1",
            shell=True,
            capture_output=True,
            text=True,
            check=False,
        )
    assert done.stdout.startswith("genguard check-server: ") and "--write-trace" not in done.stderr, done.stderr
