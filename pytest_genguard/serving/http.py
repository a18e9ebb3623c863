"""The HTTP side of a server genguard judges: JSON over the standard library's urllib, every fault one `ServerError`.

Torch-free on purpose: `genguard check-server` runs in a virtualenv with neither torch nor transformers, because the
snapshot already holds the token ids. Each error names the server and the request (method and path), so a failure in
CI says which call broke and what to do.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from pytest_genguard.core.errors import ServerError

__all__ = ["API_KEY_ENV", "Endpoint", "http_error_text"]

API_KEY_ENV = "GENGUARD_SERVER_API_KEY"
"""The environment variable a server's API key is read from (sent as ``Authorization: Bearer``); never a flag, so it
stays out of shell histories and CI logs."""

_MAX_BODY = 64 * 1024 * 1024


@dataclass(frozen=True)
class Endpoint:
    """A server's base URL (``http://127.0.0.1:8000``) and how to talk to it."""

    url: str
    timeout: float = 120.0
    api_key: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        url = self.url.rstrip("/")
        if not url.startswith(("http://", "https://")):
            raise ServerError(f"server URL {self.url!r}: write it with its scheme, e.g. http://127.0.0.1:8000")
        if url.endswith("/v1"):
            url = url[: -len("/v1")]  # an OpenAI client's base URL names the API version; genguard adds it
        object.__setattr__(self, "url", url)

    @classmethod
    def from_env(cls, url: str, *, timeout: float = 120.0) -> Endpoint:
        """The endpoint at `url`, with the API key from `API_KEY_ENV` when it is set."""
        return cls(url, timeout=timeout, api_key=os.environ.get(API_KEY_ENV) or None)

    def get(self, path: str) -> Any:
        """The JSON a GET of `path` returns; `ServerError` otherwise."""
        return self._call("GET", path, None)

    def post(self, path: str, body: dict[str, Any]) -> Any:
        """The JSON a POST of `body` to `path` returns; `ServerError` otherwise."""
        return self._call("POST", path, body)

    def try_get(self, path: str) -> Any | None:
        """Like `get`, but None when the server has no such route (404/405): for probing what a server offers."""
        try:
            return self.get(path)
        except ServerError as exc:
            if exc.__cause__ is not None and getattr(exc.__cause__, "code", None) in (404, 405):
                return None
            raise

    def post_raw(self, path: str) -> bytes:
        """The body a POST of `path` (no JSON) returns, for routes that answer without JSON; `ServerError`
        otherwise."""
        return self._request("POST", path, None)

    def _call(self, method: str, path: str, body: dict[str, Any] | None) -> Any:
        raw = self._request(method, path, body)
        try:
            return json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            start = raw[:80].decode("utf-8", "replace")
            raise ServerError(
                f"{self.url}: {method} {path}: the response is not JSON (it starts {start!r}); "
                "is this the right server?"
            ) from None

    def _request(self, method: str, path: str, body: dict[str, Any] | None) -> bytes:
        where = f"{self.url}: {method} {path}"
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(self.url + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                raw: bytes = response.read(_MAX_BODY + 1)
        except urllib.error.HTTPError as exc:
            detail = http_error_text(exc.read(4096))
            hint = (
                f" (set the server's API key in the environment variable {API_KEY_ENV})"
                if exc.code in (401, 403)
                else ""
            )
            raise ServerError(f"{where} answered HTTP {exc.code} {exc.reason}: {detail}{hint}") from exc
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, TimeoutError):
                raise ServerError(self._timeout(where)) from None
            raise ServerError(
                f"{where}: cannot reach the server ({exc.reason}); is it running, and is the URL right?"
            ) from None
        except TimeoutError:
            raise ServerError(self._timeout(where)) from None
        except (ConnectionError, OSError) as exc:  # reset or closed mid-response: the server went away
            raise ServerError(f"{where}: the connection broke ({exc}); did the server stop or crash?") from None
        if len(raw) > _MAX_BODY:
            raise ServerError(f"{where}: the response is larger than {_MAX_BODY} bytes; is this the right server?")
        return raw

    def _timeout(self, where: str) -> str:
        return (
            f"{where}: no answer within {self.timeout:g} s (a server busy starting up or overloaded; "
            "raise the timeout with --timeout)"
        )


def http_error_text(body: bytes) -> str:
    """What an error response says: the OpenAI-style ``{"error": {"message": ...}}``, ``{"detail": ...}``, or the
    start of the body."""
    text = body.decode("utf-8", "replace").strip()
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        return text[:300] or "(empty body)"
    if isinstance(doc, dict):
        error = doc.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])[:500]
        for key in ("message", "detail", "error"):
            if isinstance(doc.get(key), str):
                return str(doc[key])[:500]
    return text[:300]
