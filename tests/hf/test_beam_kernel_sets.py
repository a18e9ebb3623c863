"""Beam search across CPU kernel sets, live: the pinned fine-tuned models of `fixtures/cross_kernel` decoded with
``num_beams=3`` under AVX2 and AVX-512 (a subprocess each: torch reads ``ATEN_CPU_CAPABILITY`` at start-up) hold
under the default rule, and a real change of the model still fails it (`fixtures/cross_kernel/beam/` holds the
recorded case of issue 33, checked in `tests/core/test_cross_kernel_data.py`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cross_kernel import ARCHS, PINS, PROMPTS
from kernel_sets import supported
from perturb import logit_scale, pinned

import pytest_genguard as gg
from pytest_genguard.core.compare import compare
from pytest_genguard.core.trace import GenerationTrace
from pytest_genguard.core.verdict import Verdict

RECORD = """
import json, sys, torch
sys.path.insert(0, {support!r})
torch.set_num_threads(1)
from cross_kernel import ARCHS, PINS, PROMPTS
from perturb import pinned
import pytest_genguard as gg
tokenizer = gg.tiny_tokenizer()
traces = {{a: gg.record(pinned(a, PINS), tokenizer, PROMPTS, max_new_tokens=24, top_k=5, num_beams=3).to_json()
          for a in ARCHS}}
print(json.dumps(traces))
"""


def decode(model: Any) -> GenerationTrace:
    return gg.record(model, gg.tiny_tokenizer(), PROMPTS, max_new_tokens=24, top_k=5, num_beams=3)


def recorded_under(kernel_set: str, cache: Path) -> dict[str, GenerationTrace]:
    env = {**os.environ, "ATEN_CPU_CAPABILITY": kernel_set, "GENGUARD_CACHE_DIR": str(cache)}
    code = RECORD.format(support=str(Path(__file__).resolve().parents[1] / "support"))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    texts = json.loads(done.stdout.splitlines()[-1])
    return {arch: GenerationTrace.from_json(text, source=f"{kernel_set}/{arch}") for arch, text in texts.items()}


@pytest.mark.skipif(not (supported("avx2") and supported("avx512")), reason="this CPU cannot run AVX-512")
def test_beam_search_holds_between_avx2_and_avx512(tmp_path: Path) -> None:
    avx2, avx512 = (recorded_under(k, tmp_path / k) for k in ("avx2", "avx512"))
    for arch in ARCHS:
        assert avx2[arch].environment["cpu_capability"] == "AVX2"
        assert avx512[arch].environment["cpu_capability"] == "AVX512"
        cmp = compare(avx2[arch], avx512[arch])
        assert cmp, f"{arch}: {str(cmp).splitlines()[0]}"


@pytest.mark.parametrize("arch", ARCHS)
def test_a_real_change_of_the_model_still_fails_beam_search(arch: str, one_thread: None) -> None:
    """Negative control: every logit times (1 + 1e-4), a few times the detection floor of greedy decoding and of
    beam search alike (1.8e-5 to 3.2e-5), fails; the unchanged model is identical."""
    model = pinned(arch, PINS)
    base = decode(model)
    assert compare(base, decode(model)).verdict is Verdict.IDENTICAL
    with logit_scale(model, 1e-4):
        changed = decode(model)
    cmp = compare(base, changed)
    assert cmp.verdict is Verdict.REGRESSION, str(cmp).splitlines()[0]
