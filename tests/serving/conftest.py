"""The server tests' shared pieces: the transformers snapshots of the served model, and real vLLM servers (session
scope, one per configuration, launched side by side at first use).

Tests marked ``vllm`` need a real server: they run in CI's server leg (``GENGUARD_VLLM=1``, which builds or reuses the
vLLM virtualenv, `.ci/vllm-venv`) and are deselected, not skipped, elsewhere; the summary says how many. A server that
cannot be installed or started is an error of those tests, never a skip.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import served_model
import vllm_server

VLLM_ENV = "GENGUARD_VLLM"
URLS_ENV = "GENGUARD_VLLM_URLS"  # "float32=URL,eps=URL,bfloat16=URL,bf16_eps=URL": servers you already run
CONFIGURATIONS: dict[str, tuple[str, ...]] = {
    # processed logprobs show a sampled snapshot's sampler (test_vllm_sampler.py); teacher forcing reads prompt
    # logprobs, raw in every mode, and greedy requests' processed logprobs are their raw ones
    "float32": ("--logprobs-mode", "processed_logprobs"),
    "eps": ("--hf-overrides", '{"rms_norm_eps": 0.1}'),
    "bfloat16": ("--dtype", "bfloat16"),
    # the deploy gate's negative control: a bf16 server with a wrong norm epsilon (outside any bf16 budget)
    "bf16_eps": ("--dtype", "bfloat16", "--hf-overrides", '{"rms_norm_eps": 0.01}'),
}


FIRST = "test_vllm_real_model.py"
"""The real chat model's module runs first: its three servers (module scope) stop at its end, before the tiny model's
four (session scope) start. All seven up at once held 20 GB of a 24 GB machine, and CI's other legs beside them
left too little: a server killed at start-up."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get(VLLM_ENV) == "1":
        items.sort(key=lambda item: item.path.name != FIRST)  # stable: the rest keep their order
        return
    deselected = [item for item in items if item.get_closest_marker("vllm")]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if not item.get_closest_marker("vllm")]


@pytest.fixture(scope="session")
def served_trace() -> Any:
    """The snapshot transformers records of the served model (float32, greedy, top-5)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(served_model.MODEL_DIR)
    tokenizer = AutoTokenizer.from_pretrained(served_model.MODEL_DIR)
    return served_model.snapshot(model.eval(), tokenizer)


@pytest.fixture(scope="session")
def calibrated_trace(served_trace: Any) -> Any:
    """The served model's snapshot with its own bf16 cast's cost stored (`calibrate`): the scale of the bf16 preset
    wherever the snapshot is judged (the deploy gate's server)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pytest_genguard.hf.fidelity import calibrate

    model = AutoModelForCausalLM.from_pretrained(served_model.MODEL_DIR)
    tokenizer = AutoTokenizer.from_pretrained(served_model.MODEL_DIR)
    return calibrate(model.eval(), tokenizer, served_trace, precisions=("bf16",))


@pytest.fixture(scope="session")
def other_trace() -> Any:
    """A snapshot of another model, with another tokenizer."""
    return served_model.snapshot(*served_model.other_model())


@pytest.fixture(scope="session")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, vllm_server.VLLMServer]]:
    """One vLLM server per configuration (float32; a served config that differs; bfloat16; bfloat16 with a wrong
    norm epsilon), started side by side."""
    if os.environ.get(URLS_ENV):
        urls = dict(pair.split("=", 1) for pair in os.environ[URLS_ENV].split(","))
        yield {name: vllm_server.running_at(urls[name]) for name in CONFIGURATIONS}
        return
    logs = Path(tmp_path_factory.mktemp("vllm-logs"))
    folder = vllm_server.stable_folder(served_model.MODEL_DIR)  # vLLM keys its compile cache by the model's path
    launchers = {
        name: functools.partial(vllm_server.launch, folder, logs, extra=extra, name=name)
        for name, extra in CONFIGURATIONS.items()
    }
    with vllm_server.side_by_side(launchers, vllm_server.wait) as launched:
        yield launched


@pytest.fixture(scope="session")
def float32_url(servers: dict[str, vllm_server.VLLMServer]) -> str:
    return servers["float32"].url
