"""vLLM's sampler judged against transformers' on the served tiny llama: sampled snapshots recorded in transformers,
each step's processed distribution asked of the real float32 server (started with ``--logprobs-mode
processed_logprobs``; its teacher forcing is the same in either mode) one request per step.

vLLM applies the temperature first, as transformers does, and its repetition penalty over the prompt and the output,
as transformers does: within. Its min-p comes before top-k and top-p: with both set, outside, the cause named from the
settings. Its ``--max-logprobs`` (20 here) hides a support larger than that: unproven (exit 4), never within. A server
in the default raw mode is bad input naming the flag."""

from __future__ import annotations

import io
from typing import Any

import pytest
import served_model

from pytest_genguard.serving.check import CheckOptions, check_traces
from pytest_genguard.serving.http import Endpoint

pytestmark = pytest.mark.vllm

SETTINGS = {
    "t0.7 top_p 0.9": {"temperature": 0.7, "top_p": 0.9},
    "t0.7 min_p 0.1": {"temperature": 0.7, "min_p": 0.1},
    "t1.5 top_k 12 top_p 0.9": {"temperature": 1.5, "top_k": 12, "top_p": 0.9},
    "t1.5 top_p 0.9": {"temperature": 1.5, "top_p": 0.9},
    "t1.5 min_p 0.1 top_p 0.8": {"temperature": 1.5, "min_p": 0.1, "top_p": 0.8},
    "repetition 1.3 over 80 tokens": {"temperature": 1.0, "top_p": 0.9, "repetition_penalty": 1.3},
}
LONG = " ".join(["the quick brown fox jumps over the lazy dog"] * 9)  # 80+ tokens: a penalty past 64 tokens back


@pytest.fixture(scope="module")
def sampled() -> dict[str, Any]:
    """The served model's sampled snapshots, one per setting (2 prompts x 6 steps; the repetition one over a long
    prompt)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    from pytest_genguard import record

    model = AutoModelForCausalLM.from_pretrained(served_model.MODEL_DIR).eval()
    tokenizer = AutoTokenizer.from_pretrained(served_model.MODEL_DIR)
    out = {}
    for name, settings in SETTINGS.items():
        prompts = [LONG] if name.startswith("repetition") else list(served_model.PROMPTS[:2])
        config = GenerationConfig(do_sample=True, **{"top_k": 0, **settings})
        out[name] = record(model, tokenizer, prompts, max_new_tokens=6, seed=0, generation_config=config)
    return out


def check(url: str, trace: Any) -> tuple[int, str]:
    out = io.StringIO()
    code = check_traces(Endpoint(url), [("sampled.genguard", trace)], out=out, options=CheckOptions())
    print(out.getvalue())  # CI's log keeps the figures (docs/servers.md's table)
    return code, out.getvalue()


@pytest.mark.parametrize("name", ["t0.7 top_p 0.9", "t0.7 min_p 0.1", "t1.5 top_k 12 top_p 0.9"])
def test_the_float32_servers_sampler_holds_where_its_order_is_transformers(
    sampled: dict[str, Any], float32_url: str, name: str
) -> None:
    code, text = check(float32_url, sampled[name])
    assert code == 0, text
    assert "WITHIN_TOLERANCE sampled.genguard" in text and "  sampler within: 12 sampled steps, 0 outside" in text


def test_a_penalty_over_the_whole_sequence_holds_as_transformers(sampled: dict[str, Any], float32_url: str) -> None:
    # vLLM penalizes the prompt and the output, as transformers does: no window (llama-server's differs).
    trace = sampled["repetition 1.3 over 80 tokens"]
    assert len(trace.prompts[0].prompt_ids) > 64
    code, text = check(float32_url, trace)
    assert code == 0, text


def test_min_p_before_top_p_is_outside_and_named(sampled: dict[str, Any], float32_url: str) -> None:
    code, text = check(float32_url, sampled["t1.5 min_p 0.1 top_p 0.8"])
    assert code == 1, text
    assert "  sampler outside: " in text
    assert "cause: min-p before top-p: vLLM applies min_p before top_k and top_p" in text


def test_a_support_beyond_the_servers_logprobs_cap_is_unproven(sampled: dict[str, Any], float32_url: str) -> None:
    code, text = check(float32_url, sampled["t1.5 top_p 0.9"])
    assert code == 4, text
    assert "support not seen: the server returned its top-20" in text


def test_a_server_in_the_raw_logprobs_mode_is_bad_input_naming_the_flag(
    sampled: dict[str, Any], servers: dict[str, Any]
) -> None:
    from pytest_genguard.core.errors import ServerError

    with pytest.raises(ServerError, match="restart the server with --logprobs-mode processed_logprobs"):
        check(servers["eps"].url, sampled["t0.7 top_p 0.9"])
