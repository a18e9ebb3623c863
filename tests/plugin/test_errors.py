"""One errors module: every warning has the base `GenguardWarning`, every error `GenguardError`, all exported."""

from __future__ import annotations

import inspect

import pytest

import pytest_genguard
from pytest_genguard.core import errors


def test_every_warning_and_error_is_exported_with_its_base() -> None:
    classes = dict(inspect.getmembers(errors, inspect.isclass))
    assert sorted(classes) == sorted(errors.__all__)
    for name, cls in classes.items():
        assert getattr(pytest_genguard, name) is cls
        base = pytest_genguard.GenguardWarning if issubclass(cls, Warning) else pytest_genguard.GenguardError
        assert issubclass(cls, base), f"{name} does not derive from {base.__name__}"


def test_the_errors_keep_the_builtin_bases_callers_catch() -> None:
    assert issubclass(pytest_genguard.TraceFormatError, ValueError)
    assert issubclass(pytest_genguard.CacheFolderError, OSError)
    assert issubclass(pytest_genguard.EngineUnavailable, ImportError)


# Not GenguardPinWarning: this suite's own filterwarnings makes it an error, and in-process runs inherit that.
TEST_WARNS = """
import warnings

from pytest_genguard import GenguardCacheWarning, VerifyFallbackWarning


def test_verify() -> None:
    warnings.warn(VerifyFallbackWarning("re-generated"), stacklevel=1)


def test_cache() -> None:
    warnings.warn(GenguardCacheWarning("rebuilt"), stacklevel=1)


def test_other() -> None:
    warnings.warn(UserWarning("someone else's"), stacklevel=1)
"""


@pytest.mark.parametrize(
    ("flags", "failed", "passed"),
    [([], 0, 3), (["-W", "error::pytest_genguard.GenguardWarning"], 2, 1)],
    ids=["default", "one-filter-for-all"],
)
def test_one_filter_names_every_genguard_warning(
    pytester: pytest.Pytester, flags: list[str], failed: int, passed: int
) -> None:
    pytester.makepyfile(test_warns=TEST_WARNS)
    result = pytester.runpytest("-p", "no:randomly", *flags)
    result.assert_outcomes(failed=failed, passed=passed)
