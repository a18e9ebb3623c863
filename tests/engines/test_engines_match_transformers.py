"""Each engine decodes the tiny models as transformers does: same paths, every logprob within the float32 rule."""

from pathlib import Path
from typing import Any

import pytest
from engine_support import MODES, reference

from pytest_genguard.core.compare import compare
from pytest_genguard.core.verdict import Verdict


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("arch", ["gpt2", "llama"])
@pytest.mark.parametrize("name", ["ctranslate2", "onnxruntime"])
def test_engine_trace_holds_the_float32_rule(
    genguard_engine: Any, saved: dict[str, Path], name: str, arch: str, mode: str
) -> None:
    engine = genguard_engine(name)
    expected = reference(arch, mode)
    actual = engine.record(saved[arch], reference=expected)
    result = compare(expected, actual)
    assert result.verdict in (Verdict.IDENTICAL, Verdict.WITHIN_TOLERANCE), str(result)
    assert result.stats.exceeded == 0
    assert [p.token_ids for p in actual] == [p.token_ids for p in expected]
    assert result.stats.compared >= 2 * 24 * 7  # logprob, score and the top-5 of every step were compared
    assert actual.environment["engine"] == f"{name} {engine.backend.version}"
    assert actual.model == expected.model  # the engine's trace names the model it serves: not stale


def test_engine_trace_keeps_the_reference_settings(genguard_engine: Any, saved: dict[str, Path]) -> None:
    expected = reference("gpt2", "sampled-top-k")
    actual = genguard_engine("ctranslate2").record(saved["gpt2"], reference=expected)
    assert dict(actual.settings) == dict(expected.settings)
    assert actual.settings["do_sample"] is True and actual.settings["top_k"] == 20


@pytest.mark.parametrize("name", ["ctranslate2", "onnxruntime"])
def test_engine_fidelity_compares_every_step_exactly_with_the_long_probe(
    genguard_engine: Any, saved: dict[str, Path], name: str
) -> None:
    expected = reference("llama", "greedy")
    report = genguard_engine(name).fidelity(saved["llama"], reference=expected, budget="fp16")
    assert report.exact and report.skipped == 0
    assert int(report.metrics["steps"]) == sum(len(p.steps) for p in expected)
    assert report.status == "within", str(report)  # float32 engines: far inside the model's own fp16 cast
    assert report.probe is not None and int(report.probe.metrics["steps"]) == 255  # the tiny model's context
    assert report.probe.metrics["kld_max"] < 1e-9 and report.coverage is not None
    bounded = genguard_engine(name).fidelity(saved["llama"], reference=expected, budget="fp16", exact=False)
    assert not bounded.exact and bounded.probe is None and bounded.skipped == 0
