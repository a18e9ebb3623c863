"""The request/response mapping and the error handling, on recorded responses of the real vLLM server
(fixtures/vllm_responses, saved by tests/support/capture_responses.py) replayed over loopback: no vLLM needed."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest
from replay_server import RESPONSES, Replay, Reply, recorded, serving

from pytest_genguard.core.compare import compare
from pytest_genguard.core.comparison import environment_line
from pytest_genguard.core.errors import ServerError, ServerStale
from pytest_genguard.core.trace import GenerationTrace
from pytest_genguard.core.verdict import Verdict
from pytest_genguard.serving.dtype import infer_dtype
from pytest_genguard.serving.http import Endpoint
from pytest_genguard.serving.record import record_server
from pytest_genguard.serving.vllm import completion_request, parse_scored

EXCHANGES = ("version", "models", "tokenize", "score")


@pytest.fixture
def snapshot() -> GenerationTrace:
    """The transformers snapshot of the served model's first prompt (the one the responses were recorded for)."""
    trace = GenerationTrace.from_json((RESPONSES / "snapshot.genguard").read_text(encoding="utf-8"))
    return dataclasses.replace(trace, prompts=trace.prompts[:1])


def replay(*names: str) -> Replay:
    r = Replay()
    for name in names:
        r.add(name)
    return r


def test_the_request_genguard_sends_is_the_one_recorded(snapshot: GenerationTrace) -> None:
    request = recorded("score")["request"]
    p = snapshot[0]
    assert request["body"] == completion_request(request["body"]["model"], [*p.prompt_ids, *p.token_ids], 5)


def test_a_recorded_response_maps_to_one_step_per_path_token_with_the_top_k_by_id(snapshot: GenerationTrace) -> None:
    p = snapshot[0]
    ids = [*p.prompt_ids, *p.token_ids]
    scored = parse_scored(recorded("score")["body"], ids, len(p.prompt_ids), 5, where="recorded")
    assert [s.token_id for s in scored] == list(p.token_ids)
    for step, got in zip(p.steps, scored, strict=True):
        assert [tid for tid, _ in got.top] == list(step.top_ids)
        assert got.logprob == pytest.approx(step.logprob, abs=1e-5)


def test_the_recorded_float32_server_holds_the_snapshot_teacher_forced(snapshot: GenerationTrace) -> None:
    with serving(replay(*EXCHANGES)) as r:
        run = record_server(Endpoint(r.url), snapshot)
    comparison = compare(snapshot, run.trace)
    assert comparison.ok, str(comparison)
    assert run.mode == "teacher forced" and run.dtype == "float32" and run.dtype_source == "inferred"
    assert environment_line(comparison) == f"recorded on transformers, now vllm 0.32.0 at {r.url}, teacher forced"
    # /props first: which API the server speaks (llama-server answers it, vLLM says 404)
    paths = [req[1] for req in r.requests]
    assert paths == ["/props", "/version", "/v1/models", "/tokenize", "/tokenize", "/v1/completions"]
    assert run.trace.environment["served_model"] == recorded("models")["body"]["data"][0]["id"]


def test_the_recorded_servers_own_decoding_holds_the_snapshot_regenerated(snapshot: GenerationTrace) -> None:
    r = replay("version", "models", "tokenize", "generate")
    with serving(r):
        run = record_server(Endpoint(r.url), snapshot, mode="regenerated")
    assert compare(snapshot, run.trace).ok


def test_moved_logprobs_fail_at_the_step_they_moved(snapshot: GenerationTrace) -> None:
    body = copy.deepcopy(recorded("score")["body"])
    start = len(snapshot[0].prompt_ids)
    for entry in body["choices"][0]["prompt_logprobs"][start + 2 :]:
        for value in entry.values():
            value["logprob"] -= 0.01  # a served model that differs from step 2 on, ranks unchanged
    r = replay("version", "models", "tokenize")
    r.routes[("POST", "/v1/completions")] = Reply(200, body)
    with serving(r):
        comparison = compare(snapshot, record_server(Endpoint(r.url), snapshot).trace)
    assert comparison.verdict is Verdict.REGRESSION
    assert [d.step for d in comparison.divergences] == [2]


def test_bfloat16_logprobs_are_read_as_bfloat16_and_float32_ones_as_float32(snapshot: GenerationTrace) -> None:
    p = snapshot[0]
    ids = [*p.prompt_ids, *p.token_ids]
    for name, dtype in (("score_bfloat16", "bfloat16"), ("score", "float32")):
        scored = parse_scored(recorded(name)["body"], ids, len(p.prompt_ids), 5, where=name)
        assert infer_dtype([lp for _, lp in s.top] for s in scored).dtype == dtype


def test_a_bfloat16_server_fails_a_float32_snapshot_even_where_its_values_are_within_tolerance(
    snapshot: GenerationTrace,
) -> None:
    r = replay("version", "models", "tokenize")
    r.routes[("POST", "/v1/completions")] = Reply(200, recorded("score_bfloat16")["body"])
    with serving(r):
        run = record_server(Endpoint(r.url), snapshot)
    comparison = compare(snapshot, run.trace)
    assert run.dtype == "bfloat16" and not comparison.ok and comparison.dtype_change == ("float32", "bfloat16")


def test_a_tokenizer_that_differs_is_stale_naming_the_first_differing_token(snapshot: GenerationTrace) -> None:
    r = replay("version", "models", "score")
    tokens = list(recorded("tokenize")["body"]["tokens"])
    tokens[1] += 1
    r.routes[("POST", "/tokenize")] = Reply(200, {**recorded("tokenize")["body"], "tokens": tokens})
    with (
        serving(r),
        pytest.raises(ServerStale, match=f"from token 1 on: recorded id {tokens[1] - 1}, served id {tokens[1]}"),
    ):
        record_server(Endpoint(r.url), snapshot)
    assert all(path != "/v1/completions" for _, path, _ in r.requests)  # stale before any value was asked for


def _fails(r: Replay, snapshot: GenerationTrace, match: str, **kwargs: Any) -> ServerError:
    with serving(r), pytest.raises(ServerError, match=match) as info:
        record_server(Endpoint(r.url, timeout=kwargs.pop("timeout", 30.0)), snapshot, **kwargs)
    assert r.url in str(info.value)
    return info.value


def test_a_logprobs_cap_below_the_snapshots_top_k_names_the_flag_to_raise(snapshot: GenerationTrace) -> None:
    cap = recorded("logprobs_cap")
    assert cap["status"] == 400
    r = replay("version", "models", "tokenize")
    r.routes[("POST", "/v1/completions")] = Reply(cap["status"], cap["body"])
    error = _fails(r, snapshot, "restart the server with --max-logprobs 5")
    assert "POST /v1/completions" in str(error) and "greater than max allowed" in str(error)


def test_a_model_the_server_does_not_serve_is_named(snapshot: GenerationTrace) -> None:
    _fails(replay(*EXCHANGES), snapshot, "model 'other' is not served", model="other")


def test_a_server_error_names_the_request(snapshot: GenerationTrace) -> None:
    r = replay("version", "models", "tokenize")
    r.routes[("POST", "/v1/completions")] = Reply(500, {"error": {"message": "engine dead"}})
    _fails(r, snapshot, r"POST /v1/completions answered HTTP 500 .*engine dead")


def test_a_short_response_is_an_error_not_a_pass(snapshot: GenerationTrace) -> None:
    body = copy.deepcopy(recorded("score")["body"])
    entry = body["choices"][0]["prompt_logprobs"][-1]
    worst = max(entry, key=lambda key: entry[key]["rank"])
    del entry[worst]  # one top-k entry fewer than asked
    r = replay("version", "models", "tokenize")
    r.routes[("POST", "/v1/completions")] = Reply(200, body)
    _fails(r, snapshot, "a short response")


def test_a_truncated_list_of_positions_is_an_error(snapshot: GenerationTrace) -> None:
    body = copy.deepcopy(recorded("score")["body"])
    body["choices"][0]["prompt_logprobs"].pop()
    r = replay("version", "models", "tokenize")
    r.routes[("POST", "/v1/completions")] = Reply(200, body)
    _fails(r, snapshot, "prompt_logprobs entries for a prompt of")


def test_a_response_that_is_not_json_is_an_error(snapshot: GenerationTrace) -> None:
    r = replay("version", "models", "tokenize")
    r.routes[("POST", "/v1/completions")] = Reply(200, raw=b"<html>proxy error</html>")
    _fails(r, snapshot, "the response is not JSON")


def test_a_timeout_is_an_error_naming_the_timeout(snapshot: GenerationTrace) -> None:
    r = replay("version", "models", "tokenize")
    r.routes[("POST", "/v1/completions")] = Reply(200, recorded("score")["body"], delay=2.0)
    _fails(r, snapshot, "no answer within 0.5 s", timeout=0.5)


def test_a_server_that_goes_away_mid_run_is_an_error(snapshot: GenerationTrace) -> None:
    r = replay("version", "models", "tokenize")
    r.routes[("POST", "/v1/completions")] = Reply(hang_up=True)
    _fails(r, snapshot, "did the server stop|cannot reach")


def test_an_unreachable_server_is_an_error(snapshot: GenerationTrace) -> None:
    with serving(Replay()) as r:
        url = r.url
    with pytest.raises(ServerError, match="cannot reach the server"):
        record_server(Endpoint(url, timeout=5), snapshot)


def test_an_api_key_is_sent_from_the_environment(snapshot: GenerationTrace, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GENGUARD_SERVER_API_KEY", "secret")
    r = replay("version", "models")
    with serving(r):
        Endpoint.from_env(r.url).get("/version")
    assert r.authorization == ["Bearer secret"]
    r.routes[("GET", "/version")] = Reply(401, {"error": {"message": "unauthorized"}})
    with serving(r), pytest.raises(ServerError, match=r"HTTP 401 .*unauthorized.*GENGUARD_SERVER_API_KEY"):
        Endpoint(r.url).get("/version")


def test_a_sampled_snapshot_is_not_judged_by_the_servers_greedy_decoding(snapshot: GenerationTrace) -> None:
    sampled = dataclasses.replace(snapshot, settings={**snapshot.settings, "do_sample": True, "mode": "sample"})
    with serving(replay(*EXCHANGES)) as r, pytest.raises(ValueError, match="judges greedy snapshots"):
        record_server(Endpoint(r.url), sampled, mode="regenerated")
