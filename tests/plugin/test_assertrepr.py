"""Failing comparisons explain themselves in pytest's output without -vv: ``assert trace_a == trace_b`` (the plugin's
pytest_assertrepr_compare) and ``assert trace == genguard_snapshot`` lead with the verdict and first divergence."""

from __future__ import annotations

import pytest
from snapshot_support import ONE_TEST, run, set_variants, setup


def test_two_traces_compared_with_eq_explain_the_first_divergence(pytester: pytest.Pytester) -> None:
    setup(
        pytester,
        """
        from conftest import make_trace

        def test_same():
            assert make_trace("a") == make_trace("a")

        def test_split():
            recorded, now = make_trace("a"), make_trace("b")
            assert now == recorded
        """,
        b={"flip": "genuine"},
    )
    result = run(pytester)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "E  *AssertionError: assert GenerationTrace == GenerationTrace (left: new, right: recorded)",
            "E  *  regression: prompt 0 'hello' diverges at step 2: expected ' sat' (id 30, logprob -0.2) but got "
            "' ran' (id 32, logprob -0.3); *",
            "E  *  prompt 0 'hello', steps around the divergence:",
        ]
    )


def test_a_snapshot_failure_leads_with_the_verdict_without_vv_and_either_operand_order(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # pytest never truncates explanations on CI (it reads CI / BUILD_NUMBER): this test is about the truncated view.
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("BUILD_NUMBER", raising=False)
    setup(
        pytester,
        ONE_TEST
        + """
def test_reversed(genguard_snapshot):
    assert genguard_snapshot == make_trace("test_reversed")
""",
    )
    run(pytester, "--snapshot-update").assert_outcomes(passed=2)
    set_variants(pytester, test_greedy={"drift": 0.5}, test_reversed={"drift": 0.5})
    result = run(pytester)
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    assert "Full output truncated" in out  # pytest cut the explanation: the verdict line must come before the cut
    for name in ("test_greedy", "test_reversed"):
        result.stdout.fnmatch_lines(
            [
                f"E  *AssertionError: assert * == genguard_snapshot '{name}' (__snapshots__/test_gen/{name}.genguard)",
                "E  *  regression: prompt 0 'hello' drifts at step 0 (token ' the', id 10): logprob -0.5 vs 0 *",
            ]
        )


def test_assert_match_explains_itself_without_assertion_rewriting(pytester: pytest.Pytester) -> None:
    setup(
        pytester,
        """
        from conftest import make_trace

        def test_helper(genguard_snapshot):
            genguard_snapshot.assert_match(make_trace("test_helper"))
        """,
    )
    run(pytester, "--snapshot-update").assert_outcomes(passed=1)
    set_variants(pytester, test_helper={"weights": "b"})
    result = run(pytester, "--assert=plain")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["E  *AssertionError: stale: model changed: weights aaaaaaaaaaaa -> bbbbbbbbbbbb; *"])


def test_the_extension_used_with_plain_snapshot_puts_the_explanation_before_the_json_diff(
    pytester: pytest.Pytester,
) -> None:
    setup(
        pytester,
        """
        from pytest_genguard.plugin.snapshot import GenguardSnapshotExtension
        from conftest import make_trace

        def test_plain(snapshot):
            assert make_trace("test_plain") == snapshot.use_extension(GenguardSnapshotExtension)
        """,
    )
    run(pytester, "--snapshot-update").assert_outcomes(passed=1)
    set_variants(pytester, test_plain={"flip": "genuine"})
    result = run(pytester, "-vv")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "E  *assert [[]+ received[]] == [[]- snapshot[]]",
            "E  *  regression: prompt 0 'hello' diverges at step 2: *",
            "E  *  fix: if the new behaviour is intended: pytest --snapshot-update",
            "E  *  JSON diff (- snapshot, + received):",
        ]
    )
