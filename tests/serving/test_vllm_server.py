"""The served model judged on a real vLLM server: the transformers snapshot holds in float32, and the negative
controls fail as what they are (a served config that differs, a bfloat16 server, another model's snapshot)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import vllm_server

from pytest_genguard.core.compare import compare
from pytest_genguard.core.comparison import environment_line
from pytest_genguard.core.errors import ServerError
from pytest_genguard.core.files import atomic_write_text
from pytest_genguard.core.verdict import Verdict
from pytest_genguard.serving.check import judge, worst_share
from pytest_genguard.serving.http import Endpoint
from pytest_genguard.serving.load import batch_variance
from pytest_genguard.serving.record import record_server

pytestmark = pytest.mark.vllm


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_genguard.cli", "check-server", *args],
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_transformers_snapshot_holds_against_the_float32_server(
    served_trace: Any, float32_url: str, record_property: Any
) -> None:
    judged = judge(Endpoint(float32_url), served_trace)
    assert judged.comparison is not None and judged.run is not None
    assert judged.comparison.ok, str(judged.comparison)
    assert judged.run.dtype == "float32" and judged.run.dtype_source == "inferred"
    share, where = worst_share(judged.comparison)
    record_property("worst_drift_share", share)
    print(f"worst drift vs transformers: {share:.2%} of the allowance at {where}")  # CI's log keeps the figure
    assert share < 1.0
    line = environment_line(judged.comparison)
    assert line is not None and line.startswith(
        f"recorded on transformers, now vllm 0.32.0 at {float32_url}, teacher forced"
    )


def test_the_servers_own_greedy_decoding_matches_the_snapshot(served_trace: Any, float32_url: str) -> None:
    run = record_server(Endpoint(float32_url), served_trace, mode="regenerated")
    comparison = compare(served_trace, run.trace)
    assert comparison.ok, str(comparison)
    assert run.trace.environment["engine"] == f"vllm 0.32.0 at {float32_url}, regenerated"


def test_a_served_config_that_differs_fails_at_its_first_step(served_trace: Any, servers: dict[str, Any]) -> None:
    judged = judge(Endpoint(servers["eps"].url), served_trace)
    assert judged.comparison is not None
    assert judged.comparison.verdict is Verdict.REGRESSION
    assert judged.comparison.divergences and all(d.step == 0 for d in judged.comparison.divergences)


def test_a_bfloat16_server_fails_and_is_not_taken_for_float32(served_trace: Any, servers: dict[str, Any]) -> None:
    judged = judge(Endpoint(servers["bfloat16"].url), served_trace)
    assert judged.run is not None and judged.comparison is not None
    assert judged.run.dtype == "bfloat16" and judged.run.dtype_source == "inferred"
    assert not judged.comparison.ok
    assert judged.comparison.dtype_change == ("float32", "bfloat16")


def test_declaring_float32_for_the_bfloat16_server_is_what_the_user_said(
    served_trace: Any, servers: dict[str, Any]
) -> None:
    run = record_server(Endpoint(servers["bfloat16"].url), served_trace, dtype="float32")
    assert run.dtype_source == "declared"
    assert "declared" in str(run.trace.environment["dtype_source"])


def test_a_snapshot_of_another_model_is_stale(other_trace: Any, float32_url: str) -> None:
    judged = judge(Endpoint(float32_url), other_trace)
    assert judged.verdict is Verdict.STALE
    assert judged.stale is not None and "tokenizer" in judged.stale and "from token" in judged.stale


def test_check_server_exit_codes(served_trace: Any, other_trace: Any, servers: dict[str, Any], tmp_path: Path) -> None:
    good = tmp_path / "good" / "served.genguard"
    other = tmp_path / "other.genguard"
    wide = tmp_path / "wide.genguard"
    good.parent.mkdir()
    atomic_write_text(good, served_trace.to_json())
    atomic_write_text(other, other_trace.to_json())
    steps = [
        dataclasses.replace(s, top_ids=s.top_ids * 6, top_logprobs=s.top_logprobs * 6) for s in served_trace[0].steps
    ]
    atomic_write_text(
        wide,
        dataclasses.replace(
            served_trace, prompts=(dataclasses.replace(served_trace[0], steps=tuple(steps)),)
        ).to_json(),
    )
    url = servers["float32"].url
    ok = _cli(url, str(good.parent))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "worst drift" in ok.stdout
    regressed = _cli(servers["eps"].url, str(good))
    assert regressed.returncode == 1, regressed.stdout + regressed.stderr
    stale = _cli(url, str(other))
    assert stale.returncode == 3, stale.stdout + stale.stderr
    not_served = _cli(url, str(good), "--model", "no-such-model")
    assert not_served.returncode == 2 and "is not served" in not_served.stderr
    capped = _cli(url, str(wide))
    assert capped.returncode == 2 and "--max-logprobs 30" in capped.stderr, capped.stderr


def test_nothing_listening_is_bad_input(served_trace: Any, float32_url: str) -> None:
    record_server(Endpoint(float32_url), served_trace)  # the real server answers; an empty port does not
    with pytest.raises(ServerError, match="cannot reach the server"):
        record_server(Endpoint(f"http://127.0.0.1:{vllm_server.free_port()}"), served_trace)


def test_the_served_model_under_load_holds_and_its_batch_variance_is_reported(
    served_trace: Any, float32_url: str, record_property: Any
) -> None:
    background = [list(range(10, 10 + n)) for n in (3, 17, 40)]  # unrelated prompts of other lengths
    alone, report = batch_variance(Endpoint(float32_url), served_trace, clients=4, rounds=2, background=background)
    assert compare(served_trace, alone.trace).ok
    assert report.runs == 8 and report.steps == sum(len(p.steps) for p in served_trace.prompts)
    assert report.cache == "cold and warm"  # the test servers empty their prefix cache on request
    record_property("batch_variance", report.summary())
    print(report.summary())  # CI's log keeps the finding
    assert all(m.what != "token" for m in report.moved), report.summary()  # no path moved with batching


def test_genguard_server_option_judges_existing_snapshot_tests_without_editing_them(
    served_trace: Any, servers: dict[str, Any], tmp_path: Path
) -> None:
    pytest_run = vllm_server.served_project(tmp_path / "project", served_trace.to_json())
    created = pytest_run("--snapshot-update")
    assert created.returncode == 0, created.stdout
    holds = pytest_run("--genguard-server", servers["float32"].url)
    assert holds.returncode == 0, holds.stdout
    fails = pytest_run("--genguard-server", servers["eps"].url)
    assert fails.returncode == 1 and "on the server (--genguard-server" in fails.stdout, fails.stdout
    assert "regression" in fails.stdout


def test_the_served_model_example_judges_the_real_server(servers: dict[str, Any]) -> None:
    root = Path(__file__).resolve().parents[2]
    example = root / "examples" / "test_served_model.py"
    snapshots = root / "examples" / "__snapshots__" / "test_served_model"

    def run(url: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pytest", str(example), "-p", "no:cacheprovider", "-q", "--genguard-server", url],
            cwd=root,
            capture_output=True,
            text=True,
            check=False,
        )

    holds = run(servers["float32"].url)
    assert holds.returncode == 0, holds.stdout[-3000:]
    regressed = run(servers["eps"].url)
    assert regressed.returncode == 1 and "on the server (--genguard-server" in regressed.stdout, regressed.stdout[
        -3000:
    ]
    assert _cli(servers["float32"].url, str(snapshots)).returncode == 0
    assert _cli(servers["bfloat16"].url, str(snapshots)).returncode == 1


def test_each_server_started_here_holds_the_kv_cache_it_was_given(servers: dict[str, Any]) -> None:
    # Each one's KV cache is the test size (vllm_server.KV_CACHE: 2.0 GB a server), not vLLM's default share of the
    # machine's memory, nor the 1 GiB of its legacy variable (2.8 GB a server).
    started = {name: server for name, server in servers.items() if server.process is not None}
    if not started:
        pytest.skip("every server was given by GENGUARD_VLLM_URLS: their KV caches are their owner's")
    for name, server in started.items():
        log = server.log.read_text(errors="replace")
        assert "Explicitly set (0.25/" in log and "GiB for KV cache" in log, f"{name}: {server.log_tail()}"
