"""The HTML report marks a differing value "within tolerance" exactly where `compare()` held it within: by the same
rule (`core.rule`), rounding term included. It judged values by atol and rtol alone, and so marked a bfloat16
model's values "beyond tolerance" in a comparison that held."""

from __future__ import annotations

import dataclasses
import re

from trace_builder import MODEL, step, trace

from pytest_genguard.core.compare import compare
from pytest_genguard.core.html import Page
from pytest_genguard.core.trace import GenerationTrace
from pytest_genguard.core.verdict import Verdict

BF16 = dataclasses.replace(MODEL, dtype="bfloat16")
LSE = 20.0
"""The step's log-sum-exp: in bfloat16 one ulp of the logits is 2^-7 * 20 = 0.16, and a value's allowance has 8."""


def _trace(drift: float) -> GenerationTrace:
    chosen = dataclasses.replace(step([(5, -0.5), (6, -3.0 + drift), (7, -4.0)]), lse=LSE)
    return trace([chosen], model=BF16)


def marks(drift: float) -> tuple[Verdict, list[str]]:
    """The verdict of a bfloat16 trace against itself with one alternative's logprob moved by `drift`, and the marks
    of the page's top-k entries that differ (``d`` within, ``x`` beyond)."""
    cmp = compare(_trace(0.0), _trace(drift))
    page = Page().side_by_side(cmp, 0)
    classes = [m.group(1) or "" for m in re.finditer(r"<li(?: class=\"([^\"]*)\")?[^>]*>", page)]
    return cmp.verdict, [mark for c in classes for mark in c.split() if mark in ("d", "x")]


def test_a_value_within_the_rounding_term_is_marked_within_tolerance() -> None:
    # 0.3 is beyond atol + rtol * 3 (0.04) but within the bfloat16 rounding term (8 * 2^-7 * 20 = 1.25)
    verdict, found = marks(0.3)
    assert verdict is Verdict.WITHIN_TOLERANCE
    assert found == ["d", "d"]  # each side marks its own value


def test_a_value_beyond_the_whole_allowance_is_marked_beyond() -> None:
    # Negative control: 2.0 is beyond the allowance, rounding term included: a regression, marked so.
    verdict, found = marks(2.0)
    assert verdict is Verdict.REGRESSION
    assert found == ["x", "x"]
