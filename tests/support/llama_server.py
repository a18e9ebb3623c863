"""A real llama.cpp ``llama-server`` for the tests: the executable ``.ci/llama-cpp-wheel`` builds from the same source
and build tree as the llama-cpp-python wheel (kept in its cache folder, ``server/``, beside the shared libraries it
links), started on a free port of 127.0.0.1 with one GGUF, waited for on ``/health``, stopped by its own process group.

Sized for a 2-core machine: one thread, one slot, a 1024-token context; the KV cache type is the test's choice (f32
holds the float32 rule on an F32 file; f16 is llama-server's default).
"""

from __future__ import annotations

import contextlib
import functools
import os
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import vllm_server
from vllm_server import ROOT, ServerStartError, free_port, stop_group, wait_healthy

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
        stop_group(self.process)


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
    wait_healthy(server.url, server.process, server.log, name="llama-server", timeout=timeout, interval=0.5)
    return server


@contextlib.contextmanager
def side_by_side(work: Path, servers: Mapping[str, tuple[Path, str, Sequence[str]]]) -> Iterator[dict[str, str]]:
    """Several llama-servers started at once (name -> (GGUF, KV cache type, extra flags)), waited for together; their
    URLs by name for the duration of the block, every one stopped after it (`vllm_server.side_by_side`: a port taken
    by another process first is tried again elsewhere)."""
    launchers = {
        name: functools.partial(launch, gguf, work, kv_cache=kv, extra=extra, name=name)
        for name, (gguf, kv, extra) in servers.items()
    }
    with vllm_server.side_by_side(launchers, wait) as launched:
        yield {name: server.url for name, server in launched.items()}
