"""Two test ids never write one snapshot file: ids that differ only in characters a file name cannot hold
(``/ \\ : ? *``) get their own files (a hash of the id where cleaning changed it), today's names stay as they were,
and ids that differ only in case (one file on macOS and Windows) fail the second test naming both."""

from __future__ import annotations

import hashlib

import pytest
from snapshot_support import N2, XDIST, run, set_variants, setup, snapshot_path

ODD_IDS = """
import pytest
from conftest import make_trace

@pytest.mark.parametrize("name", ["a/b", "a\\\\b", "a:b", "a?b*", "ab"])
def test_odd(genguard_snapshot, name):
    assert make_trace(name) == genguard_snapshot
"""

IDS = ["a/b", "a\\b", "a:b", "a?b*", "ab"]
WEIGHTS = {name: {"weights": "abcde"[i]} for i, name in enumerate(IDS)}  # each id records another model


def _hashed(clean: str, raw: str) -> str:
    return f"{clean}~{hashlib.sha256(raw.encode()).hexdigest()[:8]}"


def _node_id(value: str) -> str:
    return value.encode("unicode_escape").decode()  # pytest's id: "a\\b" is "a\\\\b"


@XDIST
def test_ids_that_differ_only_in_unsafe_characters_write_files_of_their_own(
    pytester: pytest.Pytester, xdist: list[str]
) -> None:
    setup(pytester, ODD_IDS, **WEIGHTS)
    created = run(pytester, "--snapshot-update", *xdist)
    created.assert_outcomes(passed=5)
    assert "Can not relate snapshot" not in created.stdout.str()
    folder = pytester.path / "__snapshots__" / "test_gen"
    names = sorted(p.name for p in folder.iterdir())
    expected = sorted(
        [f"{_hashed('test_odd[ab]', f'test_odd[{_node_id(raw)}]')}.genguard" for raw in IDS[:4]]
        + ["test_odd[ab].genguard"]
    )
    assert names == expected
    matched = run(pytester, *xdist)  # every id reads its own model's snapshot back: none is stale
    matched.assert_outcomes(passed=5)
    matched.stdout.fnmatch_lines(["snapshots: 5 matched, 0 tolerated divergences, 0 stale, 0 regressed"])


def test_snapshot_update_keeps_hashed_files_of_existing_ids_and_deletes_those_of_removed_ids(
    pytester: pytest.Pytester,
) -> None:
    setup(pytester, ODD_IDS, **WEIGHTS)
    run(pytester, "--snapshot-update").assert_outcomes(passed=5)
    again = run(pytester, "--snapshot-update")
    again.assert_outcomes(passed=5)
    assert "deleted" not in again.stdout.str()
    assert len(list((pytester.path / "__snapshots__" / "test_gen").iterdir())) == 5
    pytester.makepyfile(test_gen=ODD_IDS.replace('"a/b", ', ""))
    removed = run(pytester, "--snapshot-update")
    removed.assert_outcomes(passed=4)
    assert not snapshot_path(pytester, _hashed("test_odd[ab]", "test_odd[a/b]")).exists()
    assert snapshot_path(pytester, _hashed("test_odd[ab]", "test_odd[a:b]")).exists()


def test_names_that_need_no_cleaning_are_unchanged(pytester: pytest.Pytester) -> None:
    setup(
        pytester,
        """
        import pytest
        from conftest import make_trace

        def test_plain(genguard_snapshot):
            assert make_trace("p") == genguard_snapshot
            assert make_trace("p") == genguard_snapshot

        @pytest.mark.parametrize("name", ["x-1", "long words"])
        def test_ids(genguard_snapshot, name):
            assert make_trace(name) == genguard_snapshot
            assert make_trace(name) == genguard_snapshot(name="second")
        """,
    )
    run(pytester, "--snapshot-update").assert_outcomes(passed=3)
    names = sorted(p.name for p in (pytester.path / "__snapshots__" / "test_gen").iterdir())
    assert names == [
        "test_ids[long words].genguard",
        "test_ids[long words][second].genguard",
        "test_ids[x-1].genguard",
        "test_ids[x-1][second].genguard",
        "test_plain.1.genguard",
        "test_plain.genguard",
    ]


@XDIST
def test_ids_that_differ_only_in_case_fail_the_second_test_naming_both(
    pytester: pytest.Pytester, xdist: list[str]
) -> None:
    setup(
        pytester,
        """
        import pytest
        from conftest import make_trace

        @pytest.mark.parametrize("name", ["Tok", "tok"])
        def test_case(genguard_snapshot, name):
            assert make_trace(name) == genguard_snapshot
        """,
    )
    set_variants(pytester, Tok={"weights": "a"}, tok={"weights": "b"})
    result = run(pytester, "--snapshot-update", *xdist)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*genguard snapshot file name clash: test_gen.py::test_case[[]tok[]] and test_gen.py::test_case[[]Tok[]] "
            "would write one snapshot file (__snapshots__/test_gen/test_case[[]tok[]].genguard) on file systems that "
            "ignore case (macOS, Windows)*",
        ]
    )
    assert [p.name for p in (pytester.path / "__snapshots__" / "test_gen").iterdir()] == ["test_case[Tok].genguard"]


def test_long_ids_are_cut_with_a_hash_and_do_not_share_a_file(pytester: pytest.Pytester) -> None:
    long_a, long_b = "x" * 300 + "a", "x" * 300 + "b"
    setup(
        pytester,
        f"""
        import pytest
        from conftest import make_trace

        @pytest.mark.parametrize("name", ["{long_a}", "{long_b}"], ids=["{long_a}", "{long_b}"])
        def test_long(genguard_snapshot, name):
            assert make_trace(name) == genguard_snapshot
        """,
    )
    set_variants(pytester, **{long_a: {"weights": "a"}, long_b: {"weights": "b"}})
    run(pytester, "--snapshot-update", *N2).assert_outcomes(passed=2)
    names = [p.name for p in (pytester.path / "__snapshots__" / "test_gen").iterdir()]
    assert len(names) == 2 and all(len(name) == 200 + len(".genguard") for name in names)
    run(pytester).assert_outcomes(passed=2)
