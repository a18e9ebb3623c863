"""The test servers' start (``tests/support/vllm_server.py``): a port another process binds between `free_port` and
the server's own bind is tried again elsewhere, and nothing else is (a real CI failure: llama-server "couldn't bind
HTTP server socket" on a port a neighbour's connection took)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
import vllm_server
from llama_server import LlamaServer as Process  # a process on a port with its log, stopped as a group


def http_server(folder: Path, port: int) -> Process:
    """Python's file server on `port` of 127.0.0.1: ``/health`` answers 200 when the folder holds a file so named."""
    log = folder / f"server-{port}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(folder)],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return Process(f"http://127.0.0.1:{port}", process, log)


def wait(server: Process) -> Process:
    vllm_server.wait_healthy(server.url, server.process, server.log, name="http.server", timeout=60, interval=0.1)
    return server


def test_a_port_taken_first_is_tried_again_on_another(tmp_path: Path) -> None:
    (tmp_path / "health").write_text("ok")
    ports: list[int] = []
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))

        def launch() -> Process:
            ports.append(int(taken.getsockname()[1]) if not ports else vllm_server.free_port())
            return http_server(tmp_path, ports[-1])

        with vllm_server.side_by_side({"one": launch}, wait) as servers:
            assert len(ports) == 2 and ports[0] != ports[1]
            assert servers["one"].url.endswith(f":{ports[1]}")
            assert servers["one"].process.poll() is None
        assert servers["one"].process.poll() is not None  # stopped after the block
    first_log = (tmp_path / f"server-{ports[0]}.log").read_text().lower()
    assert "address already in use" in first_log


def test_a_server_that_fails_otherwise_is_not_started_again(tmp_path: Path) -> None:
    launches: list[Process] = []

    def launch() -> Process:
        log = tmp_path / "broken.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-c", "import sys; print('no model file'); sys.exit(3)"], stdout=out
            )
        launches.append(Process(f"http://127.0.0.1:{vllm_server.free_port()}", process, log))
        return launches[-1]

    with (
        pytest.raises(vllm_server.ServerStartError, match="exited with 3") as failure,
        vllm_server.side_by_side({"broken": launch}, wait),
    ):
        pass
    assert not isinstance(failure.value, vllm_server.PortTaken)
    assert len(launches) == 1 and "no model file" in str(failure.value)


def test_a_port_that_stays_taken_fails_after_the_last_attempt(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        port = int(taken.getsockname()[1])
        launches: list[Process] = []

        def launch() -> Process:
            launches.append(http_server(tmp_path, port))
            return launches[-1]

        with (
            pytest.raises(vllm_server.PortTaken, match=r"(?i)address already in use"),
            vllm_server.side_by_side({"one": launch}, wait),
        ):
            pass
    assert len(launches) == vllm_server.START_ATTEMPTS


def test_free_ports_lie_below_the_ephemeral_range(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(vllm_server.PORTS_ENV, raising=False)
    low = int(vllm_server.EPHEMERAL.read_text().split()[0])
    ports = {vllm_server.free_port() for _ in range(5)}
    assert len(ports) == 5 and all(vllm_server.LOWEST_PORT <= port < low for port in ports)
    monkeypatch.setenv(vllm_server.PORTS_ENV, "18000-18009")
    assert 18000 <= vllm_server.free_port() <= 18009
