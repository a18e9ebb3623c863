"""The vLLM leg's order (tests/serving/conftest.py): the real chat model's module first, so that its three servers
stop before the tiny model's four start (all seven up at once: 20 GB of a 24 GB machine)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
QUIET = ("-p", "no:cacheprovider")


def collected(vllm: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")} | {"GENGUARD_VLLM": vllm}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/serving", "-m", "vllm", "--collect-only", "-q", *QUIET],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    return [line for line in done.stdout.splitlines() if "::" in line]


def test_the_real_chat_models_servers_come_and_go_before_the_tiny_models_start() -> None:
    items = collected("1")
    files = [item.split("::")[0].rsplit("/", 1)[-1] for item in items]
    first = files.index("test_vllm_real_model.py")
    assert first == 0 and "test_vllm_server.py" in files, files
    real = [i for i, f in enumerate(files) if f == "test_vllm_real_model.py"]
    assert real == list(range(len(real))), files  # all of them, before any other
    assert collected("0") == []  # without GENGUARD_VLLM every vllm test is deselected (the order's control)
