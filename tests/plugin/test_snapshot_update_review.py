"""Re-recording stays allowed, but never silent: the summary lists each re-recorded snapshot with what the new one
changed compared with the old one (why it was stale, the first divergence per prompt, changed finish reasons), so a
reviewer sees what --genguard-update-stale or --snapshot-update accepted."""

from __future__ import annotations

import pytest
from snapshot_support import XDIST, run, set_variants, setup
from test_summary import section

TESTS = """
from conftest import make_trace

def test_loops(genguard_snapshot):
    assert make_trace("test_loops") == genguard_snapshot

def test_same(genguard_snapshot):
    assert make_trace("test_same") == genguard_snapshot

def test_fine(genguard_snapshot):
    assert make_trace("test_fine") == genguard_snapshot
"""

WHY = "    why stale: model changed: weights aaaaaaaaaaaa -> bbbbbbbbbbbb"


@pytest.fixture
def recorded(pytester: pytest.Pytester) -> pytest.Pytester:
    setup(pytester, TESTS)
    run(pytester, "--snapshot-update").assert_outcomes(passed=3)
    return pytester


@XDIST
def test_update_stale_lists_each_rerecorded_snapshot_with_its_divergence_and_finish_reason(
    recorded: pytest.Pytester, xdist: list[str]
) -> None:
    # new weights, and the behaviour changed with them: another token at step 2 and another finish reason
    set_variants(
        recorded,
        test_loops={"weights": "b", "flip": "genuine", "finish": "eos"},
        test_same={"weights": "b"},
    )
    result = run(recorded, "--genguard-update-stale", *xdist)
    result.assert_outcomes(passed=3)
    lines = section(result.stdout.str())
    start = lines.index("re-recorded snapshots (review what each new one changed compared with the old one):")
    block = lines[start + 1 :]
    loops = block.index("  test_gen.py::test_loops (was stale)")
    assert block[loops + 1] == WHY
    assert block[loops + 2].startswith(
        "    prompt 0 'hello' diverges at step 2: expected ' sat' (id 30, logprob -0.2) but got ' ran' (id 32, "
        "logprob -0.3)"
    )
    assert block[loops + 3] == "    prompt 0 'hello' finish 'length' -> 'eos'"
    same = block.index("  test_gen.py::test_same (was stale)")
    assert block[same + 1 : same + 3] == [WHY, "    1 prompt unchanged (same tokens and finish reasons)"]
    assert "test_fine" not in "\n".join(block)  # not re-recorded, not listed


def test_snapshot_update_of_a_regression_is_listed_too(recorded: pytest.Pytester) -> None:
    set_variants(recorded, test_loops={"finish": "eos"})
    result = run(recorded, "--snapshot-update")
    result.assert_outcomes(passed=3)
    lines = section(result.stdout.str())
    i = lines.index("  test_gen.py::test_loops (was regression)")
    assert lines[i + 1] == (
        "    prompt 0 'hello' finish reason changed after step 2: expected 'length' but got 'eos' (same tokens)"
    )


def test_beyond_ten_updates_the_list_is_capped_unless_v(pytester: pytest.Pytester) -> None:
    tests = "\n".join(
        f"def test_{i}(genguard_snapshot):\n    assert make_trace('x') == genguard_snapshot\n" for i in range(12)
    )
    setup(pytester, "from conftest import make_trace\n" + tests)
    run(pytester, "--snapshot-update").assert_outcomes(passed=12)
    set_variants(pytester, x={"weights": "b"})
    short = section(run(pytester, "--genguard-update-stale").stdout.str())
    assert short[-1] == "  ... and 2 more (-v lists them all)"
    full = section(run(pytester, "--genguard-update-stale", "-v").stdout.str())
    assert not any("more (-v lists them all)" in line for line in full)
