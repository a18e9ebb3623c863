"""The long probe on the real chat model (SmolLM2-135M-Instruct): llama.cpp's converter's Q8_0 is within, proven at
every step and on the probe, and a rope base edit, which the snapshot's short prompts barely see, is outside by the
probe; its F32 file with an f32 KV cache holds the float32 rule, its probe judged by fp16, which the same edit breaks
(the sliding-window model's probe: test_long_probe_gguf.py). Against a baseline file (`core.baseline`): the Q8_0
against itself is within, proven at every step and band; its rope edit is outside it by the probe's bands. Each file's
probe is read once per process (`engines.gguf_check`), so the files' tests share one module (README's `--dist
loadfile` keeps a module in one worker).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from gguf_support import judge_on


def test_smollm2s_rope_base_edit_is_outside_at_long_context_and_its_correct_q8_0_within(
    hf: tuple[Any, Any], folder: Path, reference: Any, gguf_of: Any, genguard_engine: Any, edits: Any
) -> None:
    q8 = gguf_of("q8_0")
    judged = judge_on(q8, hf, folder, genguard_engine).judge(reference)
    assert judged.status == "within" and judged.report.skipped == 0, str(judged)
    bad = edits(q8, "gguf_set_metadata", "llama.rope.freq_base", "200000")
    report = judge_on(bad, hf, folder, genguard_engine).judge(reference).report
    assert report.probe is not None and report.probe.status == "outside", str(report)
    assert report.status == "outside"


def test_an_f32_file_with_an_f32_cache_holds_the_float32_rule_and_its_long_probe_fp16(
    hf: tuple[Any, Any], folder: Path, reference: Any, f32_gguf: Path, genguard_engine: Any, edits: Any
) -> None:
    # The float32 rule's allowance is a short path's rounding: over the probe's 2,048 positions llama.cpp's and
    # torch's float32 sums drift past it with no bug (3.4e-5 in a logprob at position 401), so the probe of an F32
    # file is judged by fp16 (on the probe), which a rope edit still breaks.
    from pytest_genguard.engines.gguf_check import GGUFJudge

    model, tokenizer = hf
    llama = genguard_engine("llama_cpp", kv_cache="f32")
    judged = GGUFJudge(f32_gguf, "f32", "F32", model, tokenizer, llama, folder).judge(reference)
    assert judged.report is None and judged.probe is not None and judged.probe.budget is not None
    assert judged.status == "holds", str(judged)
    assert "the long probe is judged by fp16" in str(judged) and "long probe within: 2048 tokens" in str(judged)
    bad = edits(f32_gguf, "gguf_set_metadata", "llama.rope.freq_base", "200000")
    broken = GGUFJudge(bad, "f32", "F32", model, tokenizer, llama, folder).judge(reference)
    assert broken.probe is not None and not broken.probe.holds and broken.status == "regression", str(broken)


def test_a_q8_0_against_itself_is_within_and_its_rope_edit_outside_by_the_probes_bands(
    hf: tuple[Any, Any], folder: Path, reference: Any, gguf_of: Any, genguard_engine: Any, edits: Any
) -> None:
    q8 = gguf_of("q8_0")
    same = dataclasses.replace(judge_on(q8, hf, folder, genguard_engine), baseline=q8).judge(reference)
    report = same.report
    assert report is not None and report.exact and report.skipped == 0
    assert same.status == "within" and report.probe is not None and report.probe.status == "within", str(same)
    assert report.budget is not None and report.budget.name == f"baseline {q8.name}"
    assert "band limits: 1.5x the baseline model.gguf's KLD mean in the same band" in str(report)
    bad = edits(q8, "gguf_set_metadata", "llama.rope.freq_base", "200000")
    judged = dataclasses.replace(judge_on(bad, hf, folder, genguard_engine), baseline=q8).judge(reference)
    report = judged.report
    assert report is not None and report.probe is not None and report.status == "outside", str(judged)
    assert report.probe.band_violations and "<- the divergence starts here" in str(report)
