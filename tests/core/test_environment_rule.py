"""One rule for which environment fields differ: `environments.environment_diff` (compare() reports it; the
per-environment and reference checks narrow it with `numeric_diff`), one scalar equality (`jsontext.same_scalar`)."""

from __future__ import annotations

import math

from pytest_genguard.core.compare import compare
from pytest_genguard.core.environments import environment_diff, environment_differences, numeric_diff
from pytest_genguard.core.jsontext import changed_keys, same_scalar
from pytest_genguard.core.trace import GenerationTrace

OLD = {"torch": "2.6.0", "python": "3.11", "num_threads": 1, "tf32": math.nan, "device": "cuda:0"}
NEW = {"torch": "2.13.0", "python": "3.12", "num_threads": 1.0, "tf32": math.nan, "gpu_name": "H100"}


def test_a_field_differs_when_its_value_or_type_differs_or_one_side_lacks_it() -> None:
    assert environment_diff(OLD, NEW) == (
        ("device", "cuda:0", None),
        ("gpu_name", None, "H100"),
        ("num_threads", 1, 1.0),  # 1 is not 1.0: a stored value's type is part of it
        ("python", "3.11", "3.12"),
        ("torch", "2.6.0", "2.13.0"),
    )  # NaN equals NaN: tf32 did not change


def test_the_numeric_fields_are_the_same_rule_without_the_interpreter_and_the_device_index() -> None:
    rows = numeric_diff(environment_diff(OLD, NEW))
    assert [k for k, _, _ in rows] == ["gpu_name", "num_threads", "torch"]
    assert environment_differences(OLD, NEW) == ("gpu_name", "num_threads", "torch")


def test_compare_reports_the_rule_for_the_traces_environments() -> None:
    old, new = GenerationTrace(prompts=(), environment=OLD), GenerationTrace(prompts=(), environment=NEW)
    assert compare(old, new).environment_diff == environment_diff(OLD, NEW)


def test_one_scalar_equality() -> None:
    assert same_scalar(math.nan, math.nan) and same_scalar("a", "a") and same_scalar(None, None)
    assert not same_scalar(1, 1.0) and not same_scalar(True, 1) and not same_scalar(0.0, None)
    assert changed_keys({"a": 1, "b": 2}, {"a": 1, "c": 2}) == ["b", "c"]
