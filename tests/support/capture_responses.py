"""Save real vLLM responses into fixtures/vllm_responses (the fast tests replay them): ``python
tests/support/capture_responses.py NAME=URL...`` with the float32 server as ``float32=`` and optionally the bfloat16
one as ``bfloat16=``. The requests are the ones genguard sends for the served model's snapshot (tests/support/
served_model.py), so a change of vLLM's response format shows in the replayed tests after a re-capture.
"""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from typing import Any

import served_model
from replay_server import RESPONSES

from pytest_genguard.core.files import atomic_write_text
from pytest_genguard.serving.vllm import completion_request, generation_request


def exchange(url: str, method: str, path: str, body: Any = None) -> dict[str, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url + path, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    return {"request": {"method": method, "path": path, "body": body}, "status": status, "body": json.loads(raw)}


def capture(servers: dict[str, str]) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(served_model.MODEL_DIR)
    tokenizer = AutoTokenizer.from_pretrained(served_model.MODEL_DIR)
    trace = served_model.snapshot(model.eval(), tokenizer)
    RESPONSES.mkdir(parents=True, exist_ok=True)
    atomic_write_text(RESPONSES / "snapshot.genguard", trace.to_json())
    first = trace[0]
    ids = [*first.prompt_ids, *first.token_ids]
    url = servers["float32"]
    name = exchange(url, "GET", "/v1/models")["body"]["data"][0]["id"]
    saved = {
        "version": exchange(url, "GET", "/version"),
        "models": exchange(url, "GET", "/v1/models"),
        "tokenize": exchange(url, "POST", "/tokenize", {"model": name, "prompt": first.prompt}),
        "score": exchange(url, "POST", "/v1/completions", completion_request(name, ids, 5)),
        "generate": exchange(
            url, "POST", "/v1/completions", generation_request(name, first.prompt_ids, len(first.steps), 5)
        ),
        "logprobs_cap": exchange(url, "POST", "/v1/completions", completion_request(name, ids, 25)),
    }
    if "bfloat16" in servers:
        saved["score_bfloat16"] = exchange(
            servers["bfloat16"], "POST", "/v1/completions", completion_request(name, ids, 5)
        )
    for key, doc in saved.items():
        atomic_write_text(RESPONSES / f"{key}.json", json.dumps(doc, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    capture(dict(arg.split("=", 1) for arg in sys.argv[1:]))
