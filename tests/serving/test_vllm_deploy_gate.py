"""The deploy gate on real vLLM servers of the served tiny model, its snapshot calibrated (its own bf16 cast's cost
stored, so the bf16 preset is at its scale): a bfloat16 server fails the float rule and holds ``--budget bf16`` (with
--concurrency and --write-trace, the written trace giving the same verdict under `genguard fidelity`); a bfloat16
server with a wrong norm epsilon is outside it; `pytest --genguard-server` under ``fidelity="bf16"`` passes the first
and fails the second."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import vllm_server

from pytest_genguard.core.files import atomic_write_text

pytestmark = pytest.mark.vllm


def genguard(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_genguard.cli", *args], capture_output=True, text=True, check=False
    )


@pytest.fixture
def snapshot_file(calibrated_trace: Any, tmp_path: Path) -> Path:
    path = tmp_path / "__snapshots__" / "served.genguard"
    atomic_write_text(path, calibrated_trace.to_json())
    return path


def test_the_bfloat16_server_fails_the_float_rule_and_holds_the_bf16_budget(
    snapshot_file: Path, served_trace: Any, servers: dict[str, Any], tmp_path: Path, record_property: Any
) -> None:
    url = servers["bfloat16"].url
    rule = genguard("check-server", url, str(snapshot_file))
    assert rule.returncode == 1 and "--budget bf16" in rule.stdout, rule.stdout + rule.stderr
    written = tmp_path / "server-traces"
    argv = ["check-server", url, str(snapshot_file), "--budget", "bf16", "--concurrency", "4"]
    gate = genguard(*argv, "--write-trace", str(written))
    print(gate.stdout)  # CI's log keeps the figures and the mass covered
    record_property("bf16_gate", gate.stdout)
    assert gate.returncode == 0, gate.stdout + gate.stderr  # within, like for like (the calibration's bounds)
    assert "logprobs per step: 20 (the server's cap" in gate.stdout
    assert "reference mass covered: " in gate.stdout and "dtype bfloat16 (inferred)" in gate.stdout
    trace = written / "served.genguard"
    again = genguard("fidelity", str(snapshot_file), str(trace), "--budget", "bf16")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "relative to the reference model's own bf16 conversion, both as lower bounds" in again.stdout
    as_json = json.loads(genguard("fidelity", str(snapshot_file), str(trace), "--budget", "bf16", "--json").stdout)
    assert as_json["status"] == "within"
    # the same server against the snapshot without its calibration: the fixed limits, measured on another model
    uncalibrated = tmp_path / "uncalibrated.genguard"
    atomic_write_text(uncalibrated, served_trace.to_json())
    fixed = genguard("check-server", url, str(uncalibrated), "--budget", "bf16")
    print(fixed.stdout)
    record_property("bf16_fixed_limits", fixed.stdout)


def test_a_bfloat16_server_with_a_wrong_norm_epsilon_is_outside_the_bf16_budget(
    snapshot_file: Path, servers: dict[str, Any], record_property: Any
) -> None:
    gate = genguard("check-server", servers["bf16_eps"].url, str(snapshot_file), "--budget", "bf16")
    print(gate.stdout)
    record_property("bf16_eps_gate", gate.stdout)
    assert gate.returncode == 1, gate.stdout + gate.stderr
    assert "OUTSIDE" in gate.stdout and "outside (exit 1)" in gate.stdout


def test_genguard_server_under_a_fidelity_marker_passes_bf16_and_fails_the_wrong_epsilon(
    calibrated_trace: Any, servers: dict[str, Any], tmp_path: Path
) -> None:
    pytest_run = vllm_server.served_project(
        tmp_path / "project", calibrated_trace.to_json(), marker="@pytest.mark.genguard(fidelity='bf16')"
    )
    assert pytest_run("--snapshot-update").returncode == 0
    holds = pytest_run("--genguard-server", servers["bfloat16"].url)
    assert holds.returncode == 0, holds.stdout[-3000:]
    fails = pytest_run("--genguard-server", servers["bf16_eps"].url, "-vv")
    assert fails.returncode == 1 and "on the server (--genguard-server" in fails.stdout, fails.stdout[-3000:]
    assert "fidelity OUTSIDE budget bf16" in fails.stdout


def test_load_reports_the_real_servers_batch_variance_per_snapshot(
    snapshot_file: Path, float32_url: str, record_property: Any
) -> None:
    done = genguard("check-server", float32_url, str(snapshot_file), "--load", "--concurrency", "4")
    record_property("load", done.stdout)
    assert done.returncode == 0, done.stdout + done.stderr
    line = next(line for line in done.stdout.splitlines() if line.startswith(f"load {snapshot_file}: "))
    assert "8 runs under load (prefix cache cold and warm), 48 steps each" in line, line
