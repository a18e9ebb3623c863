"""The `genguard_snapshot` fixture object: carries the test's tolerances, compares before syrupy decides anything,
and lets syrupy write only what may be written (see `pytest_genguard.snapshot` for the storage and the rule)."""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_genguard import session
from pytest_genguard.compare import Comparison, Verdict, compare
from pytest_genguard.snapshot import (
    GenguardSnapshotExtension,
    Outcome,
    fix_command,
    parse_snapshot,
    serialize_value,
    tolerance_kwargs,
)
from pytest_genguard.trace import GenerationTrace, TraceFormatError

if TYPE_CHECKING:
    from syrupy.assertion import SnapshotAssertion
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["GenguardSnapshot"]


class GenguardSnapshot:
    """The `genguard_snapshot` fixture: ``assert trace == genguard_snapshot`` checks the test's snapshot.

    Missing snapshots fail (``--snapshot-update`` records them); a snapshot that holds within the test's tolerances
    passes and is never rewritten; a regression fails (``--snapshot-update`` rewrites it); a stale snapshot (model,
    tokenizer, settings or prompts changed) fails (``--genguard-update-stale`` or ``--snapshot-update`` rewrites it);
    an unreadable file fails this test only and is left unchanged. Every comparison emits a ``snapshot`` event.
    """

    __hash__ = None  # type: ignore[assignment]

    def __init__(
        self, snapshot: SnapshotAssertion, request: pytest.FixtureRequest, overrides: dict[str, float]
    ) -> None:
        self._assertion = snapshot.with_defaults(extension_class=GenguardSnapshotExtension)
        self._config = request.config
        self._nodeid = request.node.nodeid
        self.overrides = dict(overrides)
        self.extension.overrides = self.overrides
        self.extension.nodeid = self._nodeid
        self.explanation: list[str] = []
        self.last_name = ""
        self.last_source = ""
        self.last_comparison: Comparison | None = None  # of the last assertion, when both sides were read

    def __repr__(self) -> str:
        if self.last_name:  # pytest shows the fixture in failure tracebacks: name the snapshot that was compared
            return f"<genguard_snapshot {self.last_name!r} ({self.last_source})>"
        return f"<genguard_snapshot {self.name!r} ({self._relative(self.location)})>"

    @property
    def extension(self) -> GenguardSnapshotExtension:
        ext = self._assertion.extension
        assert isinstance(ext, GenguardSnapshotExtension)
        return ext

    @property
    def name(self) -> str:
        """The snapshot name the next assertion uses (``test_x``, ``test_x.1``, ``test_x[name]``)."""
        return str(
            self.extension.get_snapshot_name(test_location=self._assertion.test_location, index=self._assertion.index)
        )

    @property
    def location(self) -> Path:
        """The file the next assertion compares with."""
        a = self._assertion
        return Path(self.extension.get_location(test_location=a.test_location, index=a.index))

    def __call__(self, *, name: str | None = None) -> GenguardSnapshot:
        """Options for the next assertion: `name` stores it as ``<test>[name]`` instead of by position."""
        if name is not None:
            self._assertion(name=name)
        return self

    def _relative(self, path: Path) -> str:
        try:
            return str(path.relative_to(self._config.rootpath))
        except ValueError:
            return str(path)

    def stored_text(self) -> str | None:
        """The stored text of the next assertion's snapshot (None when it does not exist)."""
        from syrupy.exceptions import SnapshotDoesNotExist

        a = self._assertion
        try:
            data = a.session.recall_snapshot(self.extension, a.test_location, a.index)
        except SnapshotDoesNotExist:
            return None
        return None if data is None else str(data)

    def load(self) -> Any:
        """The next assertion's stored trace (or history), None when missing; TraceFormatError when unreadable."""
        text = self.stored_text()
        return None if text is None else parse_snapshot(text, self._relative(self.location))

    def _execute(self, data: Any, *, update: bool, forced: bool | None = None) -> Any:
        """Run syrupy's assertion (it records used/created/updated/failed and writes when `update`)."""
        a, ext = self._assertion, self.extension
        saved = (a.update_snapshots, a.update_new_snapshots_only, ext.forced)
        a.update_snapshots, ext.forced = update, forced
        if forced is not None:
            a.update_new_snapshots_only = False
        try:
            a.__eq__(data)
        finally:
            a.update_snapshots, a.update_new_snapshots_only, ext.forced = saved
        return a.executions[a.num_executions - 1]

    def _emit(self, verdict: str, detail: str, *, failure: bool, outcome: Outcome | None = None, **extra: Any) -> None:
        event: dict[str, Any] = {
            "verdict": verdict,
            "failure": failure,
            "summary": detail.splitlines()[0] if detail else verdict,
            "detail": detail,
            "name": self.last_name,
            **extra,
        }
        if failure and outcome is not None and outcome.comparison is not None:
            event["expected"] = outcome.comparison.expected.to_json()
            event["actual"] = outcome.comparison.actual.to_json()
        session.emit("snapshot", **event)

    def _missing(self, source: str, can_record: bool = True) -> str:
        command = f"pytest --snapshot-update {shlex.quote(self._nodeid)}"
        if can_record:
            return f"genguard snapshot {self.last_name!r} does not exist ({source}); record it with: {command}"
        return (
            f"genguard snapshot {self.last_name!r} does not exist ({source}); verify() without prompts= cannot record "
            f"it: pass prompts= and max_new_tokens= (as for record()) and run {command}, or record it with "
            "`assert record(...) == genguard_snapshot`"
        )

    def _explain(self, outcome: Outcome, received: str, stored: str) -> list[str]:
        lines = outcome.detail.splitlines()
        if outcome.verdict != "invalid" and str(getattr(self._config.option, "diff_mode", "detailed")) == "detailed":
            lines += ["", *self.extension.json_diff(received, stored)]
        return lines

    def __eq__(self, other: object) -> bool:
        received = serialize_value(other)  # a TypeError saying what genguard_snapshot accepts
        settings = session.settings(self._config)
        stored = self.stored_text()
        index, source = self._assertion.index, self._relative(self.location)
        self.last_name, self.last_source, self.explanation, self.last_comparison = self.name, source, [], None
        if stored is None:
            result = self._execute(other, update=settings.snapshot_update)
            if result.created:
                self._emit("created", f"created {source}", failure=False)
            else:
                self.explanation = [self._missing(source)]
                self._emit("missing", self.explanation[0], failure=True)
        else:
            outcome = self.extension.outcome(received, stored, source=source)
            self.last_comparison = outcome.comparison
            write = settings.snapshot_update or (settings.update_stale and outcome.verdict == Verdict.STALE.value)
            result = self._execute(other, update=write)
            if result.updated:
                self._emit("updated", f"updated {source} (was: {outcome.verdict})\n{outcome.detail}", failure=False)
            else:
                self._emit(outcome.verdict, outcome.detail, failure=not result.success, outcome=outcome)
                if not result.success:
                    self.explanation = self._explain(outcome, received, stored)
        self._reference(other, index)
        return bool(result.success)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def assert_match(self, data: Any) -> None:
        """``assert data == genguard_snapshot`` that explains itself without pytest's assertion rewriting."""
        __tracebackhide__ = True
        if not self.__eq__(data):
            raise AssertionError("\n".join(self.explanation))

    def _reference(self, value: Any, index: int | str) -> None:
        """Hand traces to the cross-environment reference workflow (a no-op without its options)."""
        settings = session.settings(self._config)
        if isinstance(value, GenerationTrace) and (settings.reference or settings.record_reference):
            from pytest_genguard.reference import on_trace

            on_trace(self._config, self._nodeid, index, value, overrides=self.overrides)

    # ------------------------------------------------------------------------------------------------ verify

    def verify(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        prompts: str | list[str] | None = None,
        *,
        max_new_tokens: int | None = None,
        top_k: int = 5,
        seed: int | None = None,
        **generate_kwargs: Any,
    ) -> Comparison:
        """Check this test's stored trace against `model` by teacher forcing, without re-generating it.

        The snapshot rule applies: a changed model or tokenizer fingerprint makes the snapshot stale. With `prompts`
        (and `max_new_tokens`, `top_k`, `seed`, generate kwargs as for `record()`), the snapshot can also be
        recorded: a missing one with ``--snapshot-update``, a stale one with ``--genguard-update-stale``; changed
        arguments make the snapshot stale. Raises AssertionError (explained) when the check fails.
        """
        __tracebackhide__ = True
        from pytest_genguard.record import record
        from pytest_genguard.verify import verify_trace

        settings = session.settings(self._config)
        can_record = prompts is not None
        if can_record and max_new_tokens is None:
            raise TypeError("genguard_snapshot.verify(prompts=...): pass max_new_tokens= too, as for record()")
        stored_text = self.stored_text()
        source = self._relative(self.location)
        self.last_name, self.last_source, self.explanation = self.name, source, []

        def recorded() -> GenerationTrace:
            assert prompts is not None and max_new_tokens is not None
            return record(
                model, tokenizer, prompts, max_new_tokens=max_new_tokens, top_k=top_k, seed=seed, **generate_kwargs
            )

        if can_record and (
            settings.snapshot_update or (stored_text is None and self._assertion.update_new_snapshots_only)
        ):
            trace = recorded()
            self.assert_match(trace)
            return self.last_comparison if self.last_comparison is not None else compare(trace, trace)
        if stored_text is None:
            self.explanation = [self._missing(source, can_record)]
            self._emit("missing", self.explanation[0], failure=True, via="verify")
            raise AssertionError(self.explanation[0])
        try:
            expected = parse_snapshot(stored_text, source)
        except TraceFormatError as exc:
            rerecord = f"pytest --snapshot-update {shlex.quote(self._nodeid)}"
            self.explanation = [
                str(exc),
                f"This test fails until the file is fixed (it was left unchanged); to re-record it: {rerecord}",
            ]
            self._emit("invalid", "\n".join(self.explanation), failure=True, via="verify")
            raise AssertionError("\n".join(self.explanation)) from None
        if not isinstance(expected, GenerationTrace):
            raise TypeError(f"genguard_snapshot.verify(): {source} holds a recorder history; verify() checks traces")
        tol = tolerance_kwargs(self.overrides)
        cmp: Comparison = verify_trace(model, tokenizer, expected, check_fingerprints=True, **tol)
        if can_record and cmp.verdict is not Verdict.STALE:
            requested = _requested(expected, prompts, max_new_tokens, top_k, seed, generate_kwargs)
            changed = compare(expected, requested, **tol)
            if changed.verdict is Verdict.STALE:
                cmp = dataclasses.replace(cmp, verdict=Verdict.STALE, stale_reasons=changed.stale_reasons)
        outcome = Outcome(cmp.verdict.value, _render(cmp, fix_command(cmp.verdict.value, self._nodeid)), cmp)
        if outcome.verdict == Verdict.STALE.value and settings.update_stale and can_record:
            self._execute(recorded(), update=True, forced=False)
            self._emit("updated", f"updated {source} (was: stale)\n{outcome.detail}", failure=False, via="verify")
            return cmp
        result = self._execute(expected, update=False, forced=outcome.ok)
        self._emit(outcome.verdict, outcome.detail, failure=not result.success, outcome=outcome, via="verify")
        if not result.success:
            self.explanation = outcome.detail.splitlines()
            raise AssertionError(outcome.detail)
        return cmp


def _render(cmp: Comparison, fix: str | None) -> str:
    from pytest_genguard.explain import render
    from pytest_genguard.verify import VerifyComparison

    return cmp.render(fix) if isinstance(cmp, VerifyComparison) else render(cmp, fix=fix)


def _requested(
    stored: GenerationTrace,
    prompts: str | list[str] | None,
    max_new_tokens: int | None,
    top_k: int,
    seed: int | None,
    generate_kwargs: dict[str, Any],
) -> GenerationTrace:
    """The stored trace with the prompts and settings a verify() call asks for, to detect changed test arguments."""
    from pytest_genguard.record import SETTING_KEYS
    from pytest_genguard.trace import PromptTrace

    prompt_list = [prompts] if isinstance(prompts, str) else list(prompts or [])
    by_text = {p.prompt: p for p in stored.prompts}
    new_prompts = tuple(by_text.get(text, PromptTrace(text, (), (), "length")) for text in prompt_list)
    settings = dict(stored.settings)
    settings.update({"max_new_tokens": max_new_tokens, "record_top_k": top_k, "seed": seed})
    settings.update(
        {k: v for k, v in generate_kwargs.items() if k in SETTING_KEYS and isinstance(v, (int, float, str))}
    )
    return dataclasses.replace(stored, prompts=new_prompts, settings=settings)
