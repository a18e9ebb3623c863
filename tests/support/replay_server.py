"""A loopback HTTP server that answers with recorded responses of a real vLLM server (fixtures/vllm_responses, saved
by ``python tests/support/capture_responses.py URL``), or with a fault a test asks for: the fast tests of the
request/response mapping and of the error handling run on it, without vLLM.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

RESPONSES = Path(__file__).resolve().parents[2] / "fixtures" / "vllm_responses"


def recorded(name: str) -> dict[str, Any]:
    """A recorded exchange: ``{"request": {"method", "path", "body"}, "status", "body"}``."""
    doc: dict[str, Any] = json.loads((RESPONSES / f"{name}.json").read_text(encoding="utf-8"))
    return doc


@dataclass
class Reply:
    """What the replay server answers to one request: a status and a body (JSON or raw bytes), after `delay`."""

    status: int = 200
    body: Any = None
    raw: bytes | None = None
    delay: float = 0.0
    hang_up: bool = False  # close the connection without an answer (a server that went away)


@dataclass
class Replay:
    """Routes ``(method, path)`` to a reply, or to a function of the request body; every request is logged."""

    routes: dict[tuple[str, str], Reply | Callable[[Any], Reply]] = field(default_factory=dict)
    requests: list[tuple[str, str, Any]] = field(default_factory=list)
    authorization: list[str | None] = field(default_factory=list)  # each request's Authorization header
    url: str = ""

    def add(self, name: str) -> None:
        """Answer the recorded exchange `name`'s request with its recorded response."""
        doc = recorded(name)
        request = doc["request"]
        self.routes[(request["method"], request["path"])] = Reply(doc["status"], doc["body"])


@contextmanager
def serving(replay: Replay) -> Iterator[Replay]:
    """`replay` listening on a free port of 127.0.0.1 for the duration of the block."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _answer(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            replay.requests.append((method, self.path, body))
            replay.authorization.append(self.headers.get("Authorization"))
            route = replay.routes.get((method, self.path))
            reply = (
                Reply(404, {"detail": "Not Found"})
                if route is None
                else route
                if isinstance(route, Reply)
                else route(body)
            )
            time.sleep(reply.delay)
            if reply.hang_up:
                self.close_connection = True
                self.wfile.flush()
                self.connection.shutdown(2)
                return
            data = reply.raw if reply.raw is not None else json.dumps(reply.body).encode()
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._answer("GET")

        def do_POST(self) -> None:
            self._answer("POST")

    class Server(ThreadingHTTPServer):
        request_queue_size = 128  # socketserver's 5 resets connections beyond it: check-server --concurrency 16

    server = Server(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    replay.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield replay
    finally:
        server.shutdown()
        server.server_close()
