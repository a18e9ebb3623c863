"""What fine-tuning did to decoding: the recorder's checkpoints, snapshotted like a trace.

This test trains on every machine it runs on (cached per machine and CPU kernel set), so it checks training itself:
the history is compared under the training tolerance (`pytest_genguard.core.tolerances.TRAINING`), wide enough for the
rounding that training amplifies on another CPU, narrow enough for a real change (EOS masked, another learning rate).
"""

from __future__ import annotations

from pytest_genguard import assert_no_repetition


def test_training_trajectory(genguard_finetune, genguard_snapshot):
    tuned = genguard_finetune("gpt2", pinned=False)  # trained here: the pinned weights would test nothing
    history = tuned.history  # a GenerationRecorder's checkpoints: step, loss and a trace of the probe prompts
    assert [c.event for c in history][-1] == "train_end"
    final = history[-1].trace
    assert all(p.finish_reason == "eos" for p in final), "the fine-tuned model must have learned to stop"
    assert_no_repetition(final)
    assert history == genguard_snapshot
