"""`fidelity(..., baseline=)`: a candidate judged against a known-good copy of the same reference model (the
quantization a team shipped), both measured in the same call against the same reference, on the snapshot's paths and
the long probe band by band: the same copy again is within; the copy with its global rope base edited is outside by
the probe's bands, though its short snapshot holds."""

from __future__ import annotations

import copy

import pytest
from swa_model import swa_model

from pytest_genguard import fidelity, record
from pytest_genguard.hf.reference_copies import reference_copy
from pytest_genguard.hf.tiny import tiny_tokenizer


def test_a_copy_is_within_its_own_baseline_and_its_rope_edit_outside_it_by_a_probe_band() -> None:
    from transformers import Gemma3ForCausalLM

    tokenizer = tiny_tokenizer()
    model = swa_model(tokenizer)  # sliding window 16, a global layer with rope base 1e6
    trace = record(model, tokenizer, ["hello", "the"], max_new_tokens=4, top_k=5)
    shipped = reference_copy(model, "int8")
    again = fidelity(copy.deepcopy(shipped), tokenizer, trace, reference_model=model, baseline=shipped)
    assert again.budget is not None and again.budget.name == "baseline model"
    assert again.status == "within" and again.probe is not None and again.probe.status == "within", str(again)
    assert "band limits: 1.5x the baseline model's KLD mean in the same band" in str(again)
    # its negative control: the shipped copy with the global layer's rope base 1e6 -> 1e5 (the config's)
    config = copy.deepcopy(shipped.config)
    config.rope_parameters["full_attention"]["rope_theta"] = 1e5
    edited = Gemma3ForCausalLM(config).eval()
    edited.load_state_dict(shipped.state_dict())
    report = fidelity(edited, tokenizer, trace, reference_model=model, baseline=shipped)
    assert report.own_status == "within"  # 6 positions cannot see it
    assert report.probe is not None and report.probe.band_violations and report.status == "outside", str(report)
    assert "<- the divergence starts here" in str(report)
    with pytest.raises(ValueError, match="pass a budget or a baseline, not both"):
        fidelity(edited, tokenizer, trace, reference_model=model, baseline=shipped, budget="int8")
