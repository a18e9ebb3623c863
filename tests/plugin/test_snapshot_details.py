"""syrupy's reporting works for genguard snapshots as for any other: --snapshot-details names generated, updated and
unused snapshot files, and a snapshot whose test is gone is reported unused and removed by --snapshot-update."""

from __future__ import annotations

import pytest
from snapshot_support import N2, ONE_TEST, run, set_variants, setup, snapshot_path


def test_snapshot_details_lists_generated_and_updated_genguard_files(pytester: pytest.Pytester) -> None:
    setup(pytester, ONE_TEST)
    created = run(pytester, "--snapshot-update", "--snapshot-details")
    created.stdout.fnmatch_lines(["*Generated test_greedy (__snapshots__/test_gen/test_greedy.genguard)*"])
    set_variants(pytester, test_greedy={"weights": "b"})
    updated = run(pytester, "--snapshot-update", "--snapshot-details")
    updated.assert_outcomes(passed=1)
    updated.stdout.fnmatch_lines(["*Updated test_greedy (__snapshots__/test_gen/test_greedy.genguard)*"])


def test_a_snapshot_whose_test_is_gone_is_reported_unused_and_deleted_by_snapshot_update(
    pytester: pytest.Pytester,
) -> None:
    setup(pytester, ONE_TEST)
    run(pytester, "--snapshot-update").assert_outcomes(passed=1)
    pytester.makepyfile(test_gen=ONE_TEST.replace("def test_greedy", "def test_renamed"))
    result = run(pytester, "--snapshot-details")
    result.assert_outcomes(failed=1)  # test_renamed has no snapshot yet
    result.stdout.fnmatch_lines(
        [
            "*1 snapshot failed. 1 snapshot unused.*",
            "*Unused test_greedy (__snapshots__/test_gen/test_greedy.genguard)*",
        ]
    )
    cleaned = run(pytester, "--snapshot-update", *N2)  # the xdist controller deletes it (extension re-imported)
    cleaned.assert_outcomes(passed=1)
    cleaned.stdout.fnmatch_lines(["*1 snapshot generated. 1 unused snapshot deleted.*"])
    assert not snapshot_path(pytester, "test_greedy").exists()
    assert snapshot_path(pytester, "test_renamed").exists()
