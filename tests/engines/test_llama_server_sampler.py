"""llama.cpp's ``llama-server`` sampler judged against transformers' processors on the real chat model
(SmolLM2-135M-Instruct): sampled snapshots recorded in transformers (float32), each step's distribution after the
server's chain asked one request per step (``post_sampling_probs``), on llama.cpp's converter's F32 file with an f32
KV cache and flash attention off (the server that holds the float32 rule in test_llama_server.py).

llama.cpp applies the temperature last in its default chain: with top-p or min-p the support and the probabilities
differ, the cause shown (the ``samplers`` field makes the step within); with the aligning request, or a server started
with ``--samplers`` in transformers' order, within. Its repetition penalty covers the last 64 tokens: a penalized token
further back differs, the window named. Negative controls: top-k alone (it commutes with the temperature) holds on the
default chain; a penalty inside the window holds.

Needs what test_llama_server.py needs; a missing llama-server is an error, never a skip.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import llama_server
import pytest
from vllm_server import served_project

from pytest_genguard.serving.check import CheckOptions, check_traces
from pytest_genguard.serving.http import Endpoint
from pytest_genguard.serving.llama_server import TRANSFORMERS_ORDER

PROMPT = "The Pacific Ocean is"
STEPS = 3
SETTINGS: dict[str, dict[str, float]] = {
    "T 1.5, top_p 0.9": {"temperature": 1.5, "top_p": 0.9},
    "T 0.7, top_p 0.9": {"temperature": 0.7, "top_p": 0.9},
    "T 0.7, min_p 0.1": {"temperature": 0.7, "min_p": 0.1},
    "T 1.5, min_p 0.1": {"temperature": 1.5, "min_p": 0.1},
    "T 1.5, top_k 40": {"temperature": 1.5, "top_k": 40},
}
# A penalized word more than 64 tokens back: " Paris" in the first sentence only, asked for at the end.
FAR = (
    "Remember this: the capital of France is Paris. "
    + "Now some unrelated text about oceans, mountains, rivers and forests, written to fill the context window. " * 4
    + "So, the capital of France is"
)
NEAR = "The capital of France is Paris. Yes, the capital of France is"


@pytest.fixture(scope="module")
def urls(f32_gguf: Path, tmp_path_factory: pytest.TempPathFactory, genguard_engine: Any) -> Iterator[dict[str, str]]:
    """The converter's F32 file on two llama-servers (an f32 KV cache, flash attention off): its default sampler
    chain, and started with ``--samplers`` in transformers' order."""
    work = tmp_path_factory.mktemp("llama-server-sampler")
    flags = ("--flash-attn", "off")
    order = ("--samplers", ";".join(TRANSFORMERS_ORDER))
    specs = {"default": (f32_gguf, "f32", flags), "ordered": (f32_gguf, "f32", (*flags, *order))}
    with llama_server.side_by_side(work, specs) as running:
        yield running


@pytest.fixture(scope="module")
def sampled(hf: tuple[Any, Any]) -> dict[str, Any]:
    """transformers' sampled snapshots of the real chat model, one per setting (`STEPS` steps each); the penalty's
    over a prompt past 64 tokens and one inside them."""
    from transformers import GenerationConfig

    from pytest_genguard import record

    model, tokenizer = hf

    def one(prompt: str, **settings: float) -> Any:
        config = GenerationConfig(do_sample=True, **{"top_k": 0, **settings})
        return record(model, tokenizer, [prompt], max_new_tokens=STEPS, seed=0, generation_config=config)

    out = {name: one(PROMPT, **settings) for name, settings in SETTINGS.items()}
    out["penalty far"] = one(FAR, temperature=1.0, repetition_penalty=1.3, top_p=0.95)
    out["penalty near"] = one(NEAR, temperature=1.0, repetition_penalty=1.3, top_p=0.95)
    return out


def check(url: str, trace: Any, **options: Any) -> tuple[int, str]:
    out = io.StringIO()
    code = check_traces(Endpoint(url), [("sampled.genguard", trace)], out=out, options=CheckOptions(**options))
    print(out.getvalue())  # CI's log keeps the figures (docs/servers.md's table)
    return code, out.getvalue()


@pytest.mark.parametrize("name", ["T 1.5, top_p 0.9", "T 0.7, top_p 0.9", "T 0.7, min_p 0.1", "T 1.5, min_p 0.1"])
def test_llamas_default_chain_is_outside_naming_the_order_and_the_aligned_request_is_within(
    urls: dict[str, str], sampled: dict[str, Any], name: str
) -> None:
    code, text = check(urls["default"], sampled[name])
    assert code == 1, text
    assert "REGRESSION sampled.genguard: sampler outside" in text
    assert "cause: sampler order: llama.cpp applies temperature after top-k, top-p and min-p" in text
    assert "(shown: the fixed request is within)" in text
    code, text = check(urls["default"], sampled[name], align_sampler=True)
    assert code == 0, text
    assert "HOLDS sampled.genguard: sampler within" in text and "(aligned: samplers)" in text


@pytest.mark.parametrize("name", ["T 1.5, top_p 0.9", "T 1.5, min_p 0.1"])
def test_a_server_started_with_transformers_order_is_within(
    urls: dict[str, str], sampled: dict[str, Any], name: str
) -> None:
    code, text = check(urls["ordered"], sampled[name])
    assert code == 0, text


def test_top_k_alone_commutes_with_the_temperature_and_holds_on_the_default_chain(
    urls: dict[str, str], sampled: dict[str, Any]
) -> None:
    code, text = check(urls["default"], sampled["T 1.5, top_k 40"])
    assert code == 0, text


def test_a_penalty_beyond_64_tokens_is_outside_naming_the_window_and_the_whole_window_is_within(
    urls: dict[str, str], sampled: dict[str, Any]
) -> None:
    far = sampled["penalty far"]
    assert len(far.prompts[0].prompt_ids) > 64
    code, text = check(urls["ordered"], far)  # transformers' order: the window is the only difference
    assert code == 1, text
    assert "cause: penalty window: llama.cpp's repetition penalty covers the last 64 tokens" in text
    code, text = check(urls["ordered"], far, align_sampler=True)
    assert code == 0, text
    assert "repeat_last_n=" in text
    # negative control: the same penalty inside the window holds
    code, text = check(urls["ordered"], sampled["penalty near"])
    assert code == 0, text


def test_pytest_genguard_server_names_the_cause_and_its_option_aligns(
    urls: dict[str, str], sampled: dict[str, Any], tmp_path: Path
) -> None:
    run = served_project(tmp_path / "project", sampled["T 1.5, top_p 0.9"].to_json())
    first = run("--snapshot-update")
    assert first.returncode == 0, first.stdout + first.stderr
    differs = run("--genguard-server", urls["default"], "-vvv")  # -q -vvv: the whole failure text
    assert differs.returncode == 1, differs.stdout
    assert "sampler outside" in differs.stdout and "cause: sampler order" in differs.stdout
    aligned = run("--genguard-server", urls["default"], "--genguard-server-align-sampler")
    assert aligned.returncode == 0, aligned.stdout + aligned.stderr
