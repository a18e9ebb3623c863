"""Which server API a URL speaks, and the server as probed once per run.

A URL is judged through the mapping of the server behind it (`protocol.ServerMapping`): ``--server`` names one, or
``auto`` asks ``GET /props``, which llama-server answers (its build and model) and vLLM does not. `connect` does that
and the mapping's probe once: the `Server` it returns is what every step of a run shares (`check_traces`, each
snapshot's `record_server`, `batch_variance`, the sampler judgement, and the pytest plugin's assertions), with what
later questions learned about the server (its logprobs cap, its logprobs mode) kept beside it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pytest_genguard.core.errors import ServerError
from pytest_genguard.serving.http import Endpoint
from pytest_genguard.serving.llama_server import LLAMA_SERVER, is_llama_server
from pytest_genguard.serving.protocol import ServerInfo, ServerMapping
from pytest_genguard.serving.vllm import VLLM

__all__ = ["MAPPINGS", "SERVER_KINDS", "Server", "connect", "mapping_for"]

MAPPINGS: dict[str, ServerMapping] = {VLLM.name: VLLM, LLAMA_SERVER.name: LLAMA_SERVER}
"""Every server API genguard speaks, by ``--server`` name."""
SERVER_KINDS = ("auto", *MAPPINGS)
"""``--server``'s choices."""

T = TypeVar("T")


def mapping_for(endpoint: Endpoint, kind: str = "auto") -> ServerMapping:
    """The mapping named `kind`, or for ``auto`` the one the server at `endpoint` answers to."""
    if kind != "auto":
        if kind not in MAPPINGS:
            raise ValueError(f"--server {kind!r}: choose one of {', '.join(SERVER_KINDS)}")
        return MAPPINGS[kind]
    try:
        props = endpoint.try_get("/props")
    except ServerError:
        props = None
    return LLAMA_SERVER if is_llama_server(props) else VLLM


@dataclass
class Server:
    """A server as one run knows it: where it is, which API it speaks, what its probe said, and what later
    questions learned (`learned`: asked once, under a lock, whichever thread asks first)."""

    endpoint: Endpoint
    mapping: ServerMapping
    info: ServerInfo
    _facts: dict[str, Any] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def learned(self, key: str, ask: Callable[[], T]) -> T:
        """`ask()`'s answer, asked of the server once per run (a `ServerError` is not kept: the next caller asks
        again and fails the same way)."""
        with self._lock:
            if key not in self._facts:
                self._facts[key] = ask()
            value: T = self._facts[key]
            return value


def connect(endpoint: Endpoint, kind: str = "auto", model: str | None = None) -> Server:
    """The server at `endpoint`, its API found (`mapping_for`) and probed: the one probe of a run."""
    mapping = mapping_for(endpoint, kind)
    return Server(endpoint, mapping, mapping.probe(endpoint, model))
