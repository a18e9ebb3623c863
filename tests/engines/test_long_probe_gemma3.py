"""The long probe judged band by band on a real sliding-window family (Gemma 3 270M: 5 of 6 layers attend through a
512-token window with rope base 1e4, the others globally with 1e6): llama.cpp's converter's Q8_0 with the global
layers' rope base edited 1e6 -> 1e5 in its metadata is outside by the probe's bands, though the probe's mean over all
its positions (diluted by the first ones) holds the limit; its correct Q8_0 and the shipped Q4_K_M are within. Each
band's limit is the preset's ratio times the model's own int8 in that band (docs/fidelity.md, "Judged band by
band")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gguf_support import judge_on

from pytest_genguard.core.gate import STATUS_EXIT

pytestmark = pytest.mark.xdist_group("gemma3-gguf")  # the probes of its files read once, in one worker


def test_gemma3s_global_rope_edit_in_its_q8_0_is_outside_by_a_band_and_its_correct_files_within(
    gemma3_hf: tuple[Any, Any], gemma3_folder: Path, gemma3_reference: Any, genguard_engine: Any, edits: Any
) -> None:
    from pytest_genguard.hf.gemma3 import gemma3_gguf

    q8 = Path(genguard_engine("llama_cpp", outtype="q8_0").convert(gemma3_folder)) / "model.gguf"
    for correct in (q8, gemma3_gguf()):
        judged = judge_on(correct, gemma3_hf, gemma3_folder, genguard_engine).judge(gemma3_reference)
        assert judged.status == "within" and judged.report.probe is not None, str(judged)
        assert not judged.report.probe.band_violations
    bad = edits(q8, "gguf_set_metadata", "gemma3.rope.freq_base", "100000")
    report = judge_on(bad, gemma3_hf, gemma3_folder, genguard_engine).judge(gemma3_reference).report
    probe = report.probe
    assert probe is not None and probe.budget is not None
    assert probe.metrics["kld_mean"] < (probe.budget.kld_mean or 0)  # its mean over the whole probe holds
    assert probe.band_violations and report.status == "outside" and STATUS_EXIT[report.status] == 1, str(report)
    start = probe.band_violations[0][0]
    assert start.start >= 256, str(report)  # past the first positions, where a rope bug shows
    assert f"{start.name}: KLD mean" in str(report) and "<- the divergence starts here" in str(report)
