"""llama-server's mapping without a server: how its ``/completion`` answer becomes genguard's steps, what a malformed
one says, and how a URL's API is told apart (``GET /props``). The real server is judged in
tests/engines/test_llama_server.py (in CI by README's command, llama.cpp's extra installed); these run everywhere,
standard library only."""

from __future__ import annotations

import math
from typing import Any

import pytest
from replay_server import Replay, Reply, serving

from pytest_genguard.core.errors import ServerError
from pytest_genguard.serving import Endpoint
from pytest_genguard.serving.llama_server import LLAMA_SERVER, generation_request, is_llama_server, parse_generated
from pytest_genguard.serving.servers import MAPPINGS, SERVER_KINDS, mapping_for
from pytest_genguard.serving.vllm import VLLM

WHERE = "http://127.0.0.1:1: POST /completion"


def entry(token_id: int, logprob: float, top: list[tuple[int, float]]) -> dict[str, Any]:
    """One ``completion_probabilities`` entry as llama-server writes it (pre-sampling: ``logprob``/``top_logprobs``)."""
    return {
        "id": token_id,
        "token": f"t{token_id}",
        "bytes": [116],
        "logprob": logprob,
        "top_logprobs": [{"id": i, "token": f"t{i}", "bytes": [116], "logprob": lp} for i, lp in top],
    }


def test_generated_tokens_their_top_k_by_id_and_the_stop() -> None:
    doc = {
        "completion_probabilities": [
            entry(5, -0.1, [(5, -0.1), (7, -2.5), (9, -3.0)]),
            entry(2, -0.5, [(9, -3.5), (2, -0.5), (4, -1.5)]),  # listed out of order: ranked by logprob
        ],
        "stop_type": "eos",
    }
    generated = parse_generated(doc, 2, where=WHERE)
    assert [s.token_id for s in generated.steps] == [5, 2]
    assert generated.steps[1].top == ((2, -0.5), (4, -1.5))
    assert generated.steps[0].token_text == "t5"
    assert generated.finish_reason == "eos"
    assert parse_generated({**doc, "stop_type": "limit"}, 2, where=WHERE).finish_reason == "length"


@pytest.mark.parametrize(
    ("doc", "said"),
    [
        ({"content": "hi", "stop_type": "eos"}, "no completion_probabilities in the response (n_probs unsent?)"),
        ({"completion_probabilities": [entry(5, -0.1, [(5, -0.1)])], "stop_type": "eos"}, "1 of the 2 top logprobs"),
        ({"completion_probabilities": [{"id": 5, "logprob": -0.1}], "stop_type": "eos"}, "malformed"),
        (
            {"completion_probabilities": [entry(5, -0.1, [(5, -0.1), (6, -1.0)])], "stop_type": "word"},
            "stop_type 'word'",
        ),
    ],
    ids=["no-probabilities", "short-top-k", "no-top-logprobs", "stop-string"],
)
def test_a_malformed_answer_is_an_error_saying_what_is_missing(doc: dict[str, Any], said: str) -> None:
    with pytest.raises(ServerError, match=r"POST /completion") as raised:
        parse_generated(doc, 2, where=WHERE)
    assert said in str(raised.value)


def test_log_zero_is_minus_infinity() -> None:
    doc = {"completion_probabilities": [entry(5, 0.0, [(5, 0.0), (6, -1e300 * 1e300)])], "stop_type": "limit"}
    assert parse_generated(doc, 2, where=WHERE).steps[0].top[1] == (6, -math.inf)


def test_the_request_sends_ids_asks_for_raw_top_k_and_no_prompt_cache() -> None:
    body = generation_request([1, 2, 3], 8, 5)
    assert body["prompt"] == [1, 2, 3] and body["n_predict"] == 8 and body["n_probs"] == 5
    assert body["temperature"] == 0.0 and body["post_sampling_probs"] is False and body["cache_prompt"] is False


def test_which_api_a_url_speaks() -> None:
    assert is_llama_server({"build_info": "b1-abc", "model_path": "m.gguf"})
    assert not is_llama_server(None) and not is_llama_server({"detail": "Not Found"})
    props = Replay({("GET", "/props"): Reply(body={"build_info": "b1-abc", "default_generation_settings": {}})})
    with serving(props) as r:
        assert mapping_for(Endpoint(r.url)) is LLAMA_SERVER
    with serving(Replay({})) as r:  # 404 on /props: vLLM
        assert mapping_for(Endpoint(r.url)) is VLLM
    assert mapping_for(Endpoint("http://127.0.0.1:1"), "llama.cpp") is LLAMA_SERVER  # named: nothing asked
    assert ("auto", *MAPPINGS) == SERVER_KINDS
    with pytest.raises(ValueError, match=r"--server 'tgi': choose one of auto, vllm, llama.cpp"):
        mapping_for(Endpoint("http://127.0.0.1:1"), "tgi")
