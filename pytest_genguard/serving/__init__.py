"""Judging a running server (vLLM's OpenAI-compatible API) against the snapshots of the model it serves.

`record_server(Endpoint(url), reference)` teacher forces the reference trace's paths through the server (token ids in,
token ids out, one request per prompt) and returns a trace that compares with the snapshot like any other;
`genguard check-server URL SNAPSHOT...` does it from the command line. Standard library only (urllib): it runs in a
virtualenv without torch or transformers, because the snapshot holds the token ids.
"""

from __future__ import annotations

from pytest_genguard.serving.http import API_KEY_ENV, Endpoint
from pytest_genguard.serving.protocol import MODES, ServerInfo
from pytest_genguard.serving.record import ServerRun, record_server

__all__ = ["API_KEY_ENV", "MODES", "Endpoint", "ServerInfo", "ServerRun", "record_server"]
