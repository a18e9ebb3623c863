"""The long probe's torch side: the shipped text as the model's tokens (2,048, or the context; twice the window when
longer), both sides a chunk of logits at a time (chunked prefill gives the full pass's logits), and its judgement
by `fidelity(reference_model=)`: a model edited at long positions only is outside by the probe, the snapshot blind."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from swa_model import swa_model
from torch_threads import threads

from pytest_genguard import fidelity, record
from pytest_genguard.hf.long_probe import PROBE_TOKENS, model_chunks, probe_ids, probe_length, window_and_context
from pytest_genguard.hf.tiny import tiny_model, tiny_tokenizer


def test_the_probe_is_2048_tokens_or_the_context_and_passes_the_window() -> None:
    tokenizer = tiny_tokenizer()
    model = tiny_model("llama")
    assert probe_length(model.config) == model.config.max_position_embeddings == 256 < PROBE_TOKENS
    ids = probe_ids(tokenizer, model.config)
    assert len(ids) == 256 and ids == tokenizer(tokenizer.decode(ids))["input_ids"][:256]
    wide = copy.deepcopy(model.config)
    wide.max_position_embeddings = 1 << 20
    assert len(probe_ids(tokenizer, wide)) == PROBE_TOKENS  # the text is read again when a tokenizer needs more
    wide.sliding_window = 1500
    assert window_and_context(wide) == (1500, 1 << 20) and probe_length(wide) == 3000


def test_chunked_prefill_gives_the_full_passs_logits() -> None:
    model = tiny_model("llama")
    ids = probe_ids(tiny_tokenizer(), model.config)
    with torch.no_grad():
        full = model(torch.tensor([ids])).logits[0]
    chunks = list(model_chunks(model, chunk=64)(ids))
    assert [c.shape[0] for c in chunks] == [64] * 4
    assert torch.allclose(torch.cat(chunks), full, atol=1e-5, rtol=0)


def test_fidelity_reads_the_probe_with_the_reference_model_and_a_rope_edit_fails_it_the_snapshot_blind() -> None:
    from transformers import Gemma3ForCausalLM

    tokenizer = tiny_tokenizer()
    model = swa_model(tokenizer)  # sliding window 16, a global layer with rope base 1e6
    trace = record(model, tokenizer, ["hello", "the"], max_new_tokens=4, top_k=5)
    same = fidelity(copy.deepcopy(model), tokenizer, trace, budget={"kld_mean": 1e-3}, reference_model=model)
    assert same.probe is not None and same.status == "within" and int(same.probe.metrics["steps"]) == 2047
    assert "long probe within: 2048 tokens of the built-in long text" in str(same)
    assert same.coverage is not None and not same.coverage.passes_window
    # its negative control: the global layer's rope base 1e6 -> 1e5 (the config's, weights untouched)
    config = copy.deepcopy(model.config)
    config.rope_parameters["full_attention"]["rope_theta"] = 1e5
    moved = Gemma3ForCausalLM(config).eval()
    moved.load_state_dict(model.state_dict())
    report = fidelity(moved, tokenizer, trace, budget={"kld_mean": 1e-3}, reference_model=model)
    assert report.own_status == "within"  # 6 positions cannot see it
    assert report.probe is not None and report.probe.status == "outside", str(report)
    assert report.status == "outside" and "long probe kld_mean" in str(report).splitlines()[0]
    off = fidelity(moved, tokenizer, trace, budget={"kld_mean": 1e-3}, reference_model=model, probe=False)
    assert off.probe is None and off.status == "within"


def test_the_probes_calibration_is_stored_once_and_read_back_and_its_key_names_what_moves_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_genguard.hf import long_probe

    monkeypatch.setenv("GENGUARD_CACHE_DIR", str(tmp_path))
    model = tiny_model("llama")
    ids = probe_ids(tiny_tokenizer(), model.config)
    measured = long_probe.probe_calibration(model, ids, "int8")
    whole = {f"int8.{m}" for m in ("kld_mean", "kld_p90", "kld_p99", "kld_max", "top1_agreement")}
    assert set(measured) == whole | {"int8.band.0-128.kld_mean", "int8.band.128-256.kld_mean"}  # 256 positions
    assert len(list((tmp_path / "long-probe").glob(f"*/{long_probe.CALIBRATION_FILE}"))) == 1
    long_probe.forget()  # a new session: nothing kept in memory
    monkeypatch.setattr(long_probe, "reference_copy", lambda *args: pytest.fail("the stored calibration was measured"))
    assert long_probe.probe_calibration(model, ids, "int8") == measured
    # Its negative controls: another precision, other weights or another thread count are other keys, measured anew.
    with pytest.raises(pytest.fail.Exception, match="was measured"):
        long_probe.probe_calibration(model, ids, "fp16")
    other = copy.deepcopy(model)
    with torch.no_grad():
        other.lm_head.weight.mul_(1.01)
    keys = {
        long_probe.stored_calibration_key(m, ids, p) for m, p in ((model, "int8"), (model, "fp16"), (other, "int8"))
    }
    with threads(torch.get_num_threads() + 1):
        keys.add(long_probe.stored_calibration_key(model, ids, "int8"))
    assert len(keys) == 4


def test_a_cache_folder_that_cannot_be_written_is_warned_about_and_the_calibration_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_genguard.core.budget import CALIBRATED_METRICS, calibration_key
    from pytest_genguard.core.errors import GenguardCacheWarning
    from pytest_genguard.hf import long_probe

    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder", encoding="utf-8")
    monkeypatch.setenv("GENGUARD_CACHE_DIR", str(blocker / "cache"))  # its parent is a file: no folder can be made
    model = tiny_model("llama")
    ids = probe_ids(tiny_tokenizer(), model.config)
    with pytest.warns(GenguardCacheWarning, match="the long probe's calibration is not stored"):
        figures = long_probe.probe_calibration(model, ids, "int8")
    assert {calibration_key("int8", m) for m in CALIBRATED_METRICS} < set(figures)  # and each band's mean


def test_the_steps_are_the_same_whatever_rows_a_step_computation_takes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A large vocabulary takes fewer rows at a time (`ROW_BYTES`: glibc's fresh pages above its mmap threshold);
    the figures are the same bit for bit, and every position is there."""
    from pytest_genguard.hf import long_probe

    torch.manual_seed(0)
    vocab = 1000
    reference = [torch.randn(70, vocab) * 3, torch.randn(30, vocab) * 3]
    candidate = [r + torch.randn_like(r) * 0.1 for r in reference]
    ids = list(torch.randint(0, vocab, (101,)).tolist())
    wide = long_probe.probe_steps(reference, iter(candidate), ids)  # 32 rows at a time
    monkeypatch.setattr(long_probe, "ROW_BYTES", 3 * 8 * vocab)  # 3 rows
    narrow = long_probe.probe_steps(reference, iter(candidate), ids)
    assert [s.step for s in narrow] == list(range(1, 101))
    assert narrow == wide
    assert narrow != long_probe.probe_steps(reference, iter([c.flip(0) for c in candidate]), ids)
