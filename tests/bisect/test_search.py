"""The bisection itself, with a fake installer: which release it names, what it probes, what it skips."""

from collections.abc import Callable, Mapping

import pytest

from pytest_genguard.bisection.search import Outcome, ProbeResult, search

VERSIONS = [f"5.{minor}.0" for minor in range(12)]  # 5.0.0 .. 5.11.0


def fake(verdicts: Mapping[str, str], broken: tuple[str, ...] = ()) -> tuple[Callable[[str], ProbeResult], list[str]]:
    """A probe that reads each release's verdict from `verdicts`; releases in `broken` do not install."""
    seen: list[str] = []

    def probe(version: str) -> ProbeResult:
        seen.append(version)
        if version in broken:
            return ProbeResult(version, "", "", 0.1, skipped=f"transformers {version} does not install")
        verdict = verdicts[version]
        return ProbeResult(version, verdict, f"{verdict} in {version}", 0.1)

    return probe, seen


def history(first_bad: str) -> dict[str, str]:
    index = VERSIONS.index(first_bad)
    return {v: ("passed" if i < index else "regression") for i, v in enumerate(VERSIONS)}


@pytest.mark.parametrize("first_bad", VERSIONS[1:])
def test_search_names_the_first_release_with_another_verdict(first_bad):
    probe, seen = fake(history(first_bad))
    result = search(VERSIONS, probe)
    assert result.outcome is Outcome.FOUND
    assert result.first_bad is not None and result.first_bad.version == first_bad
    assert result.good is not None and result.good.version == VERSIONS[VERSIONS.index(first_bad) - 1]
    assert len(seen) <= 2 + 4  # both ends, then log2(10 releases between) rounded up
    assert len(set(seen)) == len(seen), "no release is probed twice"


def test_search_skips_a_release_that_does_not_install_and_probes_its_neighbour():
    probe, seen = fake(history("5.6.0"), broken=("5.5.0", "5.6.0"))
    result = search(VERSIONS, probe)
    assert result.outcome is Outcome.INCONCLUSIVE  # 5.5.0 and 5.6.0 do not install: the change is in 5.5.0-5.7.0
    assert result.candidates == ("5.5.0", "5.6.0", "5.7.0")
    assert result.good is not None and result.good.version == "5.4.0"
    assert result.first_bad is not None and result.first_bad.version == "5.7.0"
    assert "5.5.0, 5.6.0, 5.7.0" in result.message
    assert [p.version for p in result.probes if p.skipped] == [v for v in seen if v in ("5.5.0", "5.6.0")]


def test_search_finds_the_change_past_a_skipped_release():
    probe, _ = fake(history("5.8.0"), broken=("5.5.0",))
    result = search(VERSIONS, probe)
    assert result.outcome is Outcome.FOUND
    assert result.first_bad is not None and result.first_bad.version == "5.8.0"
    assert "5.5.0" in [p.version for p in result.probes if p.skipped]


def test_search_names_one_real_transition_of_a_non_monotone_history():
    verdicts = history("5.2.0")
    verdicts.update({"5.5.0": "passed", "5.6.0": "passed", "5.7.0": "passed"})  # fixed again, then broken at 5.8.0
    probe, _ = fake(verdicts)
    result = search(VERSIONS, probe)
    assert result.outcome is Outcome.FOUND
    assert result.first_bad is not None and result.good is not None
    named = VERSIONS.index(result.first_bad.version)
    assert verdicts[VERSIONS[named - 1]] == "passed" and verdicts[VERSIONS[named]] != "passed"
    assert result.good.version == VERSIONS[named - 1]
    assert result.first_bad.version in ("5.2.0", "5.8.0")


def test_search_of_good_equal_to_bad_probes_once_and_finds_nothing():
    probe, seen = fake({"5.3.0": "passed"})
    result = search(["5.3.0"], probe)
    assert result.outcome is Outcome.NO_CHANGE
    assert "same release" in result.message
    assert seen == ["5.3.0"]


def test_search_reports_no_change_when_the_bad_release_gives_the_good_verdict():
    probe, seen = fake({v: "passed" for v in VERSIONS})
    result = search(VERSIONS, probe)
    assert result.outcome is Outcome.NO_CHANGE
    assert seen == ["5.0.0", "5.11.0"]


def test_search_is_inconclusive_when_an_end_does_not_install():
    probe, _ = fake(history("5.3.0"), broken=("5.0.0",))
    result = search(VERSIONS, probe)
    assert result.outcome is Outcome.INCONCLUSIVE
    assert "5.0.0" in result.message and "does not install" in result.message


def test_search_compares_verdicts_not_verdict_lines():
    verdicts = history("5.4.0")
    probe, _ = fake(verdicts)
    result = search(VERSIONS, probe)  # every line differs ("... in 5.x"), only verdicts count
    assert result.first_bad is not None and result.first_bad.version == "5.4.0"


def test_search_reports_each_probe_as_it_finishes():
    probe, _ = fake(history("5.9.0"))
    reported: list[str] = []
    result = search(VERSIONS, probe, on_probe=lambda p: reported.append(p.version))
    assert reported == [p.version for p in result.probes]
