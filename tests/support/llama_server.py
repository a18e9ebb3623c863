"""A real llama.cpp ``llama-server`` for the tests: the executable ``.ci/llama-cpp-wheel`` builds from the same source
and build tree as the llama-cpp-python wheel (kept in its cache folder, ``server/``, beside the shared libraries it
links), started on a free port of 127.0.0.1 with one GGUF, waited for on ``/health``, stopped by its own process group.

Sized for a 2-core machine: one thread, one slot, a 1024-token context; the KV cache type is the test's choice (f32
holds the float32 rule on an F32 file; f16 is llama-server's default).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from vllm_server import ROOT, ServerStartError, free_port

SERVER_ENV = "GENGUARD_LLAMA_SERVER"  # the llama-server executable, when not the one .ci/llama-cpp-wheel built
START_TIMEOUT = 120.0  # it loads a 135M-parameter GGUF in about a second


def executable() -> Path:
    """llama-server: ``$GENGUARD_LLAMA_SERVER``, else the one ``.ci/llama-cpp-wheel`` keeps (built, or reused)."""
    given = os.environ.get(SERVER_ENV)
    if given:
        path = Path(given)
    else:
        from pytest_genguard.engines.llama_cpp import build_folder

        path = build_folder() / "server" / "llama-server"
    if not path.is_file():
        raise ServerStartError(
            f"no llama-server at {path}: build it with {ROOT / '.ci' / 'llama-cpp-wheel'} (it keeps llama-server "
            f"beside the llama-cpp-python wheel), or set {SERVER_ENV} to a llama-server executable"
        )
    return path


@dataclass
class LlamaServer:
    """One running llama-server: its URL, its process and its log."""

    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        """Stop the server's process group."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=30)

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def launch(gguf: Path, log_dir: Path, *, kv_cache: str = "f32", extra: Sequence[str] = (), name: str) -> LlamaServer:
    """Start llama-server on `gguf` (served as `name`), its KV cache in `kv_cache`; `wait` for it to answer."""
    binary = executable()
    port = free_port()
    args = [
        str(binary),
        "--model",
        str(gguf),
        "--alias",
        name,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--ctx-size",
        "1024",
        "--parallel",
        "1",
        "--threads",
        "1",
        "--threads-batch",
        "1",
        "--cache-type-k",
        kv_cache,
        "--cache-type-v",
        kv_cache,
        "--no-webui",
        *extra,
    ]
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(binary.parent), env.get("LD_LIBRARY_PATH")]))
    log = log_dir / f"llama-server-{name}-{port}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            args,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # stopped as a group
        )
    return LlamaServer(f"http://127.0.0.1:{port}", process, log)


def wait(server: LlamaServer, timeout: float = START_TIMEOUT) -> LlamaServer:
    """`server` once ``/health`` says ok (503 while the model loads); `ServerStartError` with its log otherwise."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise ServerStartError(
                f"llama-server exited with {server.process.returncode} while starting:\n{server.log_tail()}"
            )
        try:
            with urllib.request.urlopen(server.url + "/health", timeout=5) as response:
                if response.status == 200:
                    return server
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    server.stop()
    raise ServerStartError(f"llama-server did not answer /health within {timeout:g} s:\n{server.log_tail()}")


@contextlib.contextmanager
def running(gguf: Path, log_dir: Path, *, kv_cache: str = "f32", extra: Sequence[str] = (), name: str) -> Iterator[str]:
    """A llama-server's URL for the duration of the block."""
    server = wait(launch(gguf, log_dir, kv_cache=kv_cache, extra=extra, name=name))
    try:
        yield server.url
    finally:
        server.stop()
