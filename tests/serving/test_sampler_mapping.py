"""A sampled snapshot's sampler judged on a server: the request each step sends, the causes named by experiment and
their fixes, ``--align-sampler``, vLLM's raw-logprobs refusal and its order named from the settings. On loopback
servers that answer as llama-server and vLLM do, their samplers modelled exactly in Python
(tests/support/sampler_models.py); the real servers are judged in tests/engines/test_llama_server_sampler.py and
tests/serving/test_vllm_sampler.py."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path
from typing import Any

from replay_server import serving
from sampler_models import LLAMA_DEFAULT, VOCAB, chain, fake_llama_server, fake_vllm, logits_for, snapshot, softmax

from pytest_genguard.core.files import atomic_write_text
from pytest_genguard.core.sampling import SamplerSettings
from pytest_genguard.serving.check import CheckOptions, check_traces, judge
from pytest_genguard.serving.http import Endpoint
from pytest_genguard.serving.llama_server import TRANSFORMERS_ORDER, distribution_request

PROMPTS = [[5, 17, 42], [7, 8]]
T15_P09 = {"temperature": 1.5, "top_p": 0.9, "top_k": 0}


def check(url: str, trace: Any, **options: Any) -> tuple[int, str]:
    out = io.StringIO()
    code = check_traces(Endpoint(url), [("sampled.genguard", trace)], out=out, options=CheckOptions(**options))
    return code, out.getvalue()


def completions(replay: Any) -> list[dict[str, Any]]:
    return [body for method, path, body in replay.requests if (method, path) == ("POST", "/completion")]


def test_each_step_asks_its_prefix_with_the_snapshots_settings_and_the_chains_other_samplers_off() -> None:
    trace = snapshot(PROMPTS, T15_P09)
    with serving(fake_llama_server()) as r:
        code, text = check(r.url, trace)
    assert code == 1, text
    asked = completions(r)
    assert len(asked) >= 6  # one per step of the path (2 prompts x 3 steps), then the diagnosis
    first, third = asked[0], asked[2]
    assert first["prompt"] == PROMPTS[0] and third["prompt"] == [*PROMPTS[0], *trace[0].token_ids[:2]]
    assert first["n_predict"] == 1 and first["post_sampling_probs"] is True
    assert first["n_probs"] == trace[0].steps[0].support.high + 1  # one more than it kept: a longer one shows
    assert first["temperature"] == 1.5 and first["top_p"] == 0.9 and first["top_k"] == 0 and first["min_p"] == 0.0
    assert first["dry_multiplier"] == 0.0 and first["xtc_probability"] == 0.0 and first["top_n_sigma"] == -1.0
    assert "samplers" not in first and "repeat_last_n" not in first  # the server's own order and window
    assert "sent per step: temperature=1.5, top_k=0, top_p=0.9, min_p=0.0, typical_p=1.0, repeat_penalty=1.0" in text


def test_llamas_default_order_is_outside_and_named_and_the_aligned_request_is_within() -> None:
    trace = snapshot(PROMPTS, T15_P09)
    with serving(fake_llama_server()) as r:
        code, text = check(r.url, trace)
        assert code == 1, text
        assert text.splitlines()[1].startswith("REGRESSION sampled.genguard: sampler outside: 6 sampled steps")
        assert "  cause: sampler order: llama.cpp applies temperature after top-k, top-p and min-p" in text
        assert "--samplers 'penalties;temperature;top_k;top_p;min_p;typ_p'" in text
        assert "(shown: the fixed request is within)" in text
        aligned, text = check(r.url, trace, align_sampler=True)
    assert aligned == 0, text
    assert "HOLDS sampled.genguard: sampler within: 6 sampled steps, 0 outside" in text
    assert f'samplers="{list(TRANSFORMERS_ORDER)}"'.replace("'", '\\"') in text
    assert "(aligned: samplers)" in text
    assert all(body["samplers"] == list(TRANSFORMERS_ORDER) for body in completions(r)[-6:])


def test_load_says_a_sampled_snapshot_is_not_replayed_where_the_server_cannot_teacher_force() -> None:
    with serving(fake_llama_server()) as r:
        code, text = check(r.url, snapshot(PROMPTS, T15_P09), align_sampler=True, load=True)
    assert code == 0, text
    assert "load sampled.genguard: not measured: llama.cpp replays no sampled path (it cannot teacher force)" in text


def test_settings_the_order_does_not_change_hold_without_aligning() -> None:
    # negative control of the cause: top-k commutes with the temperature, so the default order is within
    trace = snapshot(PROMPTS, {"temperature": 1.5, "top_k": 12})
    with serving(fake_llama_server()) as r:
        code, text = check(r.url, trace)
    assert code == 0, text


def test_a_penalty_beyond_llamas_window_is_outside_and_named_and_the_whole_window_is_within() -> None:
    # The penalized tokens lie more than 64 tokens back: transformers penalizes them, llama.cpp's window does not.
    filler = [300 + (i % 90) for i in range(70)]
    raw = softmax(logits_for([0, *filler]))  # the made-up model's logits depend on the length and last token only
    favourites = sorted(range(VOCAB), key=lambda i: -raw[i])[:3]
    prompt = [*favourites, *filler]
    trace = snapshot([prompt], {"temperature": 1.0, "top_k": 0, "repetition_penalty": 1.5}, steps=1)
    with serving(fake_llama_server()) as r:
        code, text = check(r.url, trace)
        assert code == 1, text
        assert "cause: penalty window: llama.cpp's repetition penalty covers the last 64 tokens" in text
        assert "cause: sampler order" not in text  # tried alone, the order does not make it within
        aligned, text = check(r.url, trace, align_sampler=True)
    assert aligned == 0, text
    assert completions(r)[-1]["repeat_last_n"] == len(prompt)
    # negative control: a penalty inside the window is the same on both sides
    near = snapshot(
        [[*filler[-60:], *favourites]], {"temperature": 1.0, "top_k": 0, "repetition_penalty": 1.5}, steps=1
    )
    with serving(fake_llama_server()) as r:
        assert check(r.url, near)[0] == 0


def test_logits_that_moved_are_outside_with_no_cause_and_a_cast_budget_judges_them_at_its_dtype() -> None:
    # A server whose logits move by up to 2e-3 (an f16 KV cache's size): no alignment makes it within, so no cause is
    # named; --budget fp16 judges its sampler by float16's rule (the raw values by the budget).
    from pytest_genguard.core.budget import PRESETS

    trace = snapshot(PROMPTS, T15_P09)
    with serving(fake_llama_server(noise=2e-3)) as r:
        code, text = check(r.url, trace, align_sampler=True)
        assert code == 1, text
        assert "cause unknown: no alignment genguard knows for this server makes the step within" in text
        code, text = check(r.url, trace, align_sampler=True, budget=PRESETS["fp16"])
        assert code == 0, text
        assert "sampler within" in text
        # negative control: twenty times that is outside float16's rule too
    with serving(fake_llama_server(noise=4e-2)) as r:
        code, text = check(r.url, trace, align_sampler=True, budget=PRESETS["fp16"])
    assert code == 1, text


def test_the_request_maps_values_only() -> None:
    body = distribution_request([1, 2], {"temperature": 0.7}, 9)
    assert body == {
        "temperature": 0.7,
        "prompt": [1, 2],
        "n_predict": 1,
        "n_probs": 9,
        "post_sampling_probs": True,
        "return_tokens": True,
        "cache_prompt": True,
        "seed": 0,
    }
    sampler = SamplerSettings(temperature=0.7, top_p=0.9)
    default = chain(logits_for([1, 2]), sampler, [1, 2], order=LLAMA_DEFAULT)
    assert sum(p > 0 for p in default) != sum(p > 0 for p in chain(logits_for([1, 2]), sampler, [1, 2]))


def test_vllm_with_raw_logprobs_is_bad_input_naming_its_flag(tmp_path: Path) -> None:
    trace = snapshot(PROMPTS, T15_P09)
    path = tmp_path / "sampled.genguard"
    atomic_write_text(path, trace.to_json())
    with serving(fake_vllm(processed=False)) as r:
        done = subprocess.run(
            [sys.executable, "-m", "pytest_genguard.cli", "check-server", r.url, str(path)],
            capture_output=True,
            text=True,
            check=False,
        )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "vLLM returns raw logprobs" in done.stderr
    assert "restart the server with --logprobs-mode processed_logprobs" in done.stderr


def test_vllm_judges_the_raw_path_and_the_sampler_and_names_its_order_from_the_settings() -> None:
    with serving(fake_vllm()) as r:
        code, text = check(r.url, snapshot(PROMPTS, T15_P09))
        assert code == 0, text
        assert "WITHIN_TOLERANCE sampled.genguard: worst drift" in text and "  sampler within: 6 sampled steps" in text
        both = snapshot(PROMPTS, {"temperature": 1.5, "top_k": 0, "top_p": 0.8, "min_p": 0.1})
        code, text = check(r.url, both)
    assert code == 1, text
    assert "cause: min-p before top-p: vLLM applies min_p before top_k and top_p" in text
    assert "(known from the settings)" in text
    checks = [b for m, p, b in r.requests if p == "/v1/completions" and b.get("top_k") == 1 and b["logprobs"] == 2]
    assert len(checks) == 2  # its logprobs mode asked once per run (two runs here)


def test_a_greedy_snapshot_is_not_asked_for_a_sampler() -> None:
    trace = snapshot(PROMPTS, T15_P09)
    greedy = trace.__class__(prompts=trace.prompts, settings={**trace.settings, "do_sample": False}, environment={})
    with serving(fake_vllm()) as r:
        judged = judge(Endpoint(r.url), greedy)
    assert judged.sampler is None
    assert not [
        b for m, p, b in r.requests if p == "/v1/completions" and "logprobs" in b and "prompt_logprobs" not in b
    ]
