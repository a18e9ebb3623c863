"""genguard_snapshot also snapshots a GenerationRecorder's history: each checkpoint's trace is compared bitwise in
the environment that recorded it and with the training tolerance elsewhere, a changed checkpoint schedule is stale,
a training loss beyond tolerance is a regression."""

from __future__ import annotations

import pytest
from snapshot_support import age, file_state, run, set_variants, setup, snapshot_path

import pytest_genguard.hf.recorder  # noqa: F401  (imports transformers here, not inside pytester's in-process runs)

HISTORY = """
from pytest_genguard.hf.recorder import Checkpoint, GenerationRecorder, RecorderHistory
from conftest import HERE, make_trace, json


def history(name):
    path = HERE / "variants.json"
    v = json.loads(path.read_text()).get(name + ".history", {}) if path.exists() else {}
    steps = v.get("steps", [10, 20])
    return RecorderHistory(
        Checkpoint(
            step=s, epoch=s / 20, loss=v.get("loss", 2.5) / (i + 1), event="step", trace=make_trace(f"{name}.{i}")
        )
        for i, s in enumerate(steps)
    )


def test_history(genguard_snapshot):
    assert history("test_history") == genguard_snapshot


def test_recorder(genguard_snapshot):
    recorder = GenerationRecorder(["hello"])
    recorder.history.extend(history("test_recorder"))
    assert recorder == genguard_snapshot
"""


ELSEWHERE = {"environment": {"cpu_capability": "AVX512"}}  # the same checkpoints, trained on another CPU


def elsewhere(name: str, **variant: object) -> dict[str, dict[str, object]]:
    """Variants that put both checkpoints of test `name` in another environment (`variant` on checkpoint 1)."""
    return {f"{name}.0": ELSEWHERE, f"{name}.1": {**ELSEWHERE, **variant}}


@pytest.fixture
def recorded(pytester: pytest.Pytester) -> pytest.Pytester:
    setup(pytester, HISTORY)
    run(pytester, "--snapshot-update").assert_outcomes(passed=2)
    for name in ("test_history", "test_recorder"):
        age(snapshot_path(pytester, name))
    return pytester


def test_a_history_snapshot_is_the_recorder_json_and_matches_within_tolerance(recorded: pytest.Pytester) -> None:
    path = snapshot_path(recorded, "test_history")
    text = path.read_text(encoding="utf-8")
    assert text.startswith('{\n  "genguard_history": 1,')
    before = file_state(path)
    tie = {"test_recorder.0": {**ELSEWHERE, "flip": "tie"}, "test_recorder.1": ELSEWHERE}
    set_variants(recorded, **elsewhere("test_history", drift=2e-5), **tie)
    result = run(recorded, "--snapshot-update")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["snapshots: 1 matched, 1 tolerated divergence, 0 stale, 0 regressed"])
    assert file_state(path) == before


def test_in_the_recording_environment_a_history_is_compared_bitwise(recorded: pytest.Pytester) -> None:
    """Training is bitwise reproducible on one machine, so there any drift, however small, is a change."""
    set_variants(recorded, **{"test_history.1": {"drift": 2e-5}})
    result = run(recorded, "-k", "test_history")
    result.assert_outcomes(failed=1, deselected=1)
    result.stdout.fnmatch_lines(
        ["E  *  regression: 2 checkpoints, worst at checkpoint 1 (step 20, step) (same environment: logprobs atol 0, *"]
    )
    set_variants(recorded, **elsewhere("test_history", drift=2e-5))  # the control: on another CPU it holds
    run(recorded, "-k", "test_history").assert_outcomes(passed=1, deselected=1)


def test_a_regressed_checkpoint_fails_naming_the_checkpoint(recorded: pytest.Pytester) -> None:
    set_variants(recorded, **{"test_history.1": {"flip": "genuine"}})
    result = run(recorded, "-k", "test_history")
    result.assert_outcomes(failed=1, deselected=1)
    result.stdout.fnmatch_lines(
        [
            "E  *  regression: 2 checkpoints, worst at checkpoint 1 (step 20, step) (same environment: logprobs *",
            "E  *  regression: prompt 0 'hello' diverges at step 2: *",
        ]
    )


def test_a_changed_checkpoint_schedule_is_stale(recorded: pytest.Pytester) -> None:
    set_variants(recorded, **{"test_recorder.history": {"steps": [10, 20, 30]}})
    result = run(recorded, "-k", "test_recorder")
    result.assert_outcomes(failed=1, deselected=1)
    result.stdout.fnmatch_lines(
        [
            "E  *  stale: the recorder's checkpoints changed: [[](10, 'step'), (20, 'step')[]] -> *; if intended, "
            "re-record with: pytest --genguard-update-stale test_gen.py::test_recorder"
        ]
    )


def test_a_training_loss_beyond_tolerance_is_a_regression(recorded: pytest.Pytester) -> None:
    set_variants(recorded, **{"test_history.history": {"loss": 2.6}}, **elsewhere("test_history"))
    result = run(recorded, "-k", "test_history")
    result.assert_outcomes(failed=1, deselected=1)
    result.stdout.fnmatch_lines(
        [
            "E  *  regression: 2 checkpoints, worst at checkpoint 0 (step 10, step) (training tolerance: *",
            "E  *  training loss beyond tolerance: checkpoint 0 (step 10): loss 2.5 -> 2.6; checkpoint 1 (step 20): "
            "loss 1.25 -> 1.3",
        ]
    )


def test_histories_use_the_training_tolerance_with_the_marker_on_top_not_the_ini_tolerances(
    recorded: pytest.Pytester,
) -> None:
    # 0.01 of drift on another CPU: beyond float32 tolerances, within the training tolerance (atol 0.02, rtol 0.1).
    set_variants(recorded, **elsewhere("test_history", drift=0.01))
    run(recorded, "-k", "test_history").assert_outcomes(passed=1, deselected=1)
    # The ini tolerances are about decoding: tightening them does not tighten a history's comparison ...
    recorded.makeini("[pytest]\ngenguard_atol = 0\ngenguard_rtol = 0\n")
    run(recorded, "-k", "test_history").assert_outcomes(passed=1, deselected=1)
    # ... the test's own marker does.
    test_file = recorded.path / "test_gen.py"
    text = test_file.read_text()
    test_file.write_text(
        text.replace(
            "def test_history(genguard_snapshot):",
            "import pytest\n\n\n@pytest.mark.genguard(atol=0, rtol=0)\ndef test_history(genguard_snapshot):",
        )
    )
    result = run(recorded, "-k", "test_history")
    result.assert_outcomes(failed=1, deselected=1)
    result.stdout.fnmatch_lines(["E  *  regression: 2 checkpoints, * (training tolerance: logprobs atol 0, rtol 0, *"])
