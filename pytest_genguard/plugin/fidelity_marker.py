"""``@pytest.mark.genguard(fidelity="int8")``: a test whose model changed precision on purpose has its snapshot judged
by a fidelity budget instead of the float rule (`pytest_genguard.core.budget`).

The stored snapshot is the reference (the model as it was tested), what the test gives is the candidate. For
``assert trace == genguard_snapshot`` both are traces: the KLD is the lower bound from the recorded top-k. For
``genguard_snapshot.verify(model, tokenizer)`` the candidate model is in process and teacher forced along the stored
paths (`pytest_genguard.hf.fidelity`): its full distribution is known, so the bound is tighter. Changed prompts,
settings, tokenizer or chat template still make the snapshot stale (`compare()` with `Fingerprints.TOKENIZER`: a
budget compares distributions over the same tokens); a changed model fingerprint or dtype does not (it is the point).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest

from pytest_genguard.core.budget import Budget, FidelityReport, budget_of, traces_report
from pytest_genguard.core.change import Kld, kld_of
from pytest_genguard.core.compare import Fingerprints, compare
from pytest_genguard.core.comparison import render
from pytest_genguard.core.documents import Outcome, stored_trace
from pytest_genguard.core.trace import GenerationTrace
from pytest_genguard.core.verdict import Rerecord, Verdict
from pytest_genguard.plugin.snapshot import FIDELITY
from pytest_genguard.plugin.subjects import Subject

__all__ = ["Judged", "between_traces", "marker_budget", "with_model"]

Judge = Callable[[GenerationTrace], FidelityReport]
"""The stored reference in, the report on the candidate out."""


def marker_budget(node: pytest.Item) -> Budget | None:
    """The budget of the closest ``@pytest.mark.genguard(fidelity=...)`` (a preset name or a mapping of limits)."""
    for mark in node.iter_markers("genguard"):
        if FIDELITY in mark.kwargs:
            value = mark.kwargs[FIDELITY]
            where = f"@pytest.mark.genguard(fidelity=...) on {node.nodeid}"
            if not isinstance(value, (str, Mapping, Budget)):
                pytest.fail(f"{where}: {value!r} is not a preset name (bf16, fp16, int8, int4) or a mapping", False)
            try:
                return budget_of(value, where=where)
            except ValueError as exc:
                pytest.fail(str(exc), False)
    return None


def between_traces(received: Any, budget: Budget) -> Judge:
    """The judge of ``trace == genguard_snapshot``: two traces, the KLD bounded from their top-k."""

    def judge(reference: GenerationTrace) -> FidelityReport:
        if not isinstance(received, GenerationTrace):
            raise TypeError(f"@pytest.mark.genguard(fidelity=...) judges traces; got {type(received).__name__}")
        return traces_report(reference, received, budget)

    return judge


def with_model(model: Any, tokenizer: Any, budget: Budget) -> Judge:
    """The judge of ``genguard_snapshot.verify(model, tokenizer)``: the model teacher forced along the reference."""
    from pytest_genguard.hf.fidelity import fidelity  # torch: only where a model is judged

    return lambda reference: fidelity(model, tokenizer, reference, budget=budget)


class Judged:
    """A subject judged by a fidelity budget against the stored reference; written as `inner` writes."""

    def __init__(self, inner: Subject, judge: Judge, candidate: Callable[[], Any], rerecord: Rerecord) -> None:
        self.inner, self.judge, self.candidate, self.rerecord = inner, judge, candidate, rerecord
        self.via: str | None = FIDELITY  # the event says so: the HTML report draws the per-step KLD
        self.can_write = inner.can_write
        self.report: FidelityReport | None = None

    def counted(self) -> Any:
        return self.inner.counted()

    def compare(self, stored: str, source: str) -> Outcome:
        reference = stored_trace(
            stored, source, self.rerecord, where="@pytest.mark.genguard(fidelity=...)", does="it judges traces"
        )
        if isinstance(reference, Outcome):
            return reference
        candidate = self.candidate()
        cmp = None
        if isinstance(candidate, GenerationTrace):  # changed prompts, settings or tokenizer: stale, whatever the model
            cmp = compare(reference, candidate, check_fingerprints=Fingerprints.TOKENIZER, allow_dtype_change=True)
            if cmp.verdict is Verdict.STALE:
                return Outcome(cmp.verdict, render(cmp, fix=self.rerecord.command(cmp.verdict)), cmp)
        self.report = self.judge(reference)
        verdict = Verdict.WITHIN_TOLERANCE if self.report.holds else Verdict.REGRESSION
        lines = [str(self.report)]
        dtype = None if not isinstance(candidate, GenerationTrace) else candidate.dtype
        if dtype is not None and dtype != reference.dtype:
            lines.append(f"  the dtype switch judged by this budget: recorded {reference.dtype}, now {dtype}")
        if not self.report.holds:
            lines.append(
                "  if the copy is meant to be this far, loosen the budget (@pytest.mark.genguard(fidelity={...})); "
                f"to make this trace the new reference: {self.rerecord.command(verdict)}"
            )
        return Outcome(verdict, "\n".join(lines), cmp)  # cmp: both traces travel with the event to the report

    def written(self) -> tuple[Any, str]:
        return self.inner.written()

    def explain(self, outcome: Outcome, stored: str) -> list[str]:
        return outcome.detail.splitlines()

    def changes(self, outcome: Outcome, data: Any) -> list[str]:
        return self.inner.changes(outcome, data)

    def kld(self, *, per_step: bool) -> Kld | None:
        """The judgement's KLD (exact with the model in process, else a lower bound) and the budget's KLD limits."""
        report = self.report
        if report is None or not report.steps:
            return None
        limits = report.budget.limits() if report.budget is not None else {}
        return kld_of(report.steps, limits=limits, per_step=per_step)
