"""What fine-tuning did to decoding: the recorder's checkpoints, snapshotted like a trace."""

from __future__ import annotations

from pytest_genguard import assert_no_repetition


def test_training_trajectory(genguard_finetune, genguard_snapshot):
    tuned = genguard_finetune("gpt2")  # the same cached model as in test_decoding.py
    history = tuned.history  # a GenerationRecorder's checkpoints: step, loss and a trace of the probe prompts
    assert [c.event for c in history][-1] == "train_end"
    final = history[-1].trace
    assert all(p.finish_reason == "eos" for p in final), "the fine-tuned model must have learned to stop"
    assert_no_repetition(final)
    assert history == genguard_snapshot
