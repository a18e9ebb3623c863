"""Which server API a URL speaks: each mapping by name, and the probe that tells them apart.

A URL is judged through the mapping of the server behind it (`protocol.ServerMapping`): ``--server`` names one, or
``auto`` asks ``GET /props``, which llama-server answers (its build and model) and vLLM does not.
"""

from __future__ import annotations

from pytest_genguard.core.errors import ServerError
from pytest_genguard.serving.http import Endpoint
from pytest_genguard.serving.llama_server import LLAMA_SERVER, is_llama_server
from pytest_genguard.serving.protocol import ServerMapping
from pytest_genguard.serving.vllm import VLLM

__all__ = ["MAPPINGS", "SERVER_KINDS", "mapping_for"]

MAPPINGS: dict[str, ServerMapping] = {VLLM.name: VLLM, LLAMA_SERVER.name: LLAMA_SERVER}
"""Every server API genguard speaks, by ``--server`` name."""
SERVER_KINDS = ("auto", *MAPPINGS)
"""``--server``'s choices."""


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
