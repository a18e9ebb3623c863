"""Fixtures shared by the plugin tests (which drive pytest itself through pytester)."""

from pathlib import Path

# hypothesis' pytest plugin imports hypothesis at the end of every session. pytester's in-process runs restore
# sys.modules afterwards, so unless hypothesis is already imported out here each in-process run imports it again
# (measured: 7.4 s -> 0.5 s for a one-test pytester run on 2 busy cores).
import hypothesis  # noqa: F401
import pytest


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Path:
    """A project whose test module is the requesting module's `TESTS`, with a genguard cache folder and an `out`
    folder (`GENGUARD_TEST_OUT`) for what its tests report. The outer run's pytest-xdist variables are removed:
    they would leak into an inner serial run."""
    pytester.makepyfile(test_models=request.module.TESTS)
    pytester.makeini("[pytest]\ngenguard_cache_dir = models\n")
    out = pytester.path / "out"
    out.mkdir()
    monkeypatch.setenv("GENGUARD_TEST_OUT", str(out))
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)
    return out
