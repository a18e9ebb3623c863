"""The `genguard_snapshot` fixture object: carries the test's tolerances, compares before syrupy decides anything,
and lets syrupy write only what may be written (see `pytest_genguard.plugin.snapshot` for the storage and the rule).

Environment-keyed baselines (``--genguard-baselines per-env``): a trace is compared with the baseline of its own
environment class (`environment.environment_class`: ``cpu-float32``, ``cuda-sm90-bfloat16``), kept in
``<test dir>/__genguard_baselines__/<class>/<test module>/<name>.genguard``, outside ``__snapshots__`` because syrupy
deletes the files there that no assertion claims. When the class has no baseline yet, the nearest one is used
(`reference.pick_baseline`: same device type and dtype with the nearest GPU capability, then the same dtype), else
the shared ``__snapshots__`` snapshot; the failure text and the ``snapshot`` event name the baseline that was used.
The rule, tolerances, stale detection and update flags are those of shared mode, but writes go only to this class's
own baseline, never to the fallback it was compared with: ``--snapshot-update`` records it (also when the fallback
matched) and rewrites it when it regressed, ``--genguard-update-stale`` records or rewrites it when stale,
``--snapshot-update-new-only`` records it only when nothing failed; a baseline that matches is never rewritten.
Each file belongs to one test, which pytest-xdist runs in one worker, so an atomic write (temporary file +
os.replace) suffices, with no lock. syrupy keeps tracking the shared snapshot read-only (so a shared file stays
"used" and is not deleted by ``--snapshot-update``): it counts the assertion as passed or failed, never as written.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_genguard.core import events
from pytest_genguard.core.compare import Comparison, Verdict, compare
from pytest_genguard.core.trace import GenerationTrace, TraceFormatError
from pytest_genguard.hf.environment import environment_class
from pytest_genguard.plugin import keep, session
from pytest_genguard.plugin.snapshot import (
    GenguardSnapshotExtension,
    Outcome,
    fix_command,
    parse_snapshot,
    serialize_value,
    tolerance_kwargs,
)
from pytest_genguard.plugin.snapshot_review import accepted_changes, nonfinite_message, nonfinite_values

if TYPE_CHECKING:
    from syrupy.assertion import SnapshotAssertion
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["Baseline", "GenguardSnapshot"]

PER_ENV = "per-env"
PER_ENV_OPTION = "--genguard-baselines per-env"


class GenguardSnapshot:
    """The `genguard_snapshot` fixture: ``assert trace == genguard_snapshot`` checks the test's snapshot.

    Missing snapshots fail (``--snapshot-update`` records them); a snapshot that holds within the test's tolerances
    passes and is never rewritten; a regression fails (``--snapshot-update`` rewrites it); a stale snapshot (model,
    tokenizer, settings or prompts changed) fails (``--genguard-update-stale`` or ``--snapshot-update`` rewrites it);
    an unreadable file fails this test only and is left unchanged. Every comparison emits a ``snapshot`` event.
    With ``--genguard-baselines per-env`` the same holds for the baseline of the trace's environment class (see
    the module docstring); `location`, `stored_text()` and `load()` still name the shared snapshot.
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
        self.per_env = session.settings(request.config).baselines == PER_ENV
        self.extension.fix_options = PER_ENV_OPTION if self.per_env else ""
        self.explanation: list[str] = []
        self.last_name = ""
        self.last_source = ""
        self.last_comparison: Comparison | None = None  # of the last assertion, when both sides were read
        self.allow_nonfinite = False  # @pytest.mark.genguard(allow_nonfinite=True): NaN/inf may be stored

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
        """The shared snapshot file of the next assertion (per-env baselines: the last fallback, see `Baseline`)."""
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
        """The stored text of the next assertion's snapshot (None when it does not exist; OSError when it cannot be
        read)."""
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

    def _execute(self, data: Any, *, update: bool, forced: bool | None = None, read_from: Path | None = None) -> Any:
        """Run syrupy's assertion (it records used/created/updated/failed and writes when `update`); `read_from`
        makes it read that file instead of the shared snapshot (per-env baselines)."""
        a, ext = self._assertion, self.extension
        saved = (a.update_snapshots, a.update_new_snapshots_only, ext.forced, ext.read_from)
        a.update_snapshots, ext.forced, ext.read_from = update, forced, read_from
        if forced is not None:
            a.update_new_snapshots_only = False
        try:
            a.__eq__(data)
        finally:
            a.update_snapshots, a.update_new_snapshots_only, ext.forced, ext.read_from = saved
        result = a.executions[a.num_executions - 1]
        ledger = self._config.stash.get(keep.LEDGER_KEY, None)
        if ledger is not None:  # this file was asserted: --snapshot-update's keeping does not apply (see keep.py)
            ledger.asserted.add(str(result.snapshot_location))
        return result

    def _write_failed(self, exc: BaseException | None, source: str, **extra: Any) -> bool:
        """An assertion whose write failed: say so with the OS error and the path (syrupy reports nothing but a
        failed assertion, which read like a missing snapshot). Errors other than OSError propagate."""
        if exc is None:
            return True
        if not isinstance(exc, OSError):
            raise exc
        self.explanation = [
            f"genguard snapshot {self.last_name!r} could not be written to {source}: {type(exc).__name__}: {exc}",
            "nothing was written (a snapshot already there is unchanged); make the folder writable (or free space) "
            "and run the same command again",
        ]
        self._emit("write error", "\n".join(self.explanation), failure=True, **extra)
        return False

    def _unreadable(self, other: object, source: str, exc: OSError) -> bool:
        """A snapshot that exists but cannot be read (permissions, a folder in its place): fail, write nothing."""
        self.explanation = [
            f"genguard snapshot {self.last_name!r} cannot be read ({source}): {type(exc).__name__}: {exc}",
            "it was left unchanged; make it readable (or move what is in its place) and run again",
        ]
        self._execute(other, update=False, forced=False)
        self._emit("invalid", "\n".join(self.explanation), failure=True)
        return False

    def _refuse_nonfinite(self, other: object) -> bool | None:
        """Without @pytest.mark.genguard(allow_nonfinite=True), data with NaN/inf is neither recorded nor compared:
        NaN would equal NaN ("identical") and a broken model would pass against its own broken snapshot."""
        if self.allow_nonfinite:
            return None
        count, where = nonfinite_values(other)
        if not count:
            return None
        self.explanation = nonfinite_message(self.last_name, self.last_source, count, where)
        self._execute(other, update=False, forced=False)  # syrupy counts a failed assertion; nothing is written
        self._emit("non-finite", "\n".join(self.explanation), failure=True)
        return False

    def _refuse_nonfinite_output(
        self, trace: GenerationTrace, stored: GenerationTrace, source: str, extra: dict[str, Any]
    ) -> None:
        """verify(): the model's teacher-forced (or re-recorded) trace must be finite without the opt-in."""
        count, where = (0, []) if self.allow_nonfinite else nonfinite_values(trace)
        if count:
            self.explanation = nonfinite_message(self.name, source, count, where, received="the model's output")
            self._execute(stored, update=False, forced=False)
            self._emit("non-finite", "\n".join(self.explanation), failure=True, **extra)
            raise AssertionError("\n".join(self.explanation))

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
        events.emit("snapshot", **event)

    def _missing(self, source: str, can_record: bool = True, base: Baseline | None = None) -> str:
        command = fix_command("invalid", self._nodeid, self.extension.fix_options)
        head = f"genguard snapshot {self.last_name!r} does not exist ({source})"
        what = "it"
        if base is not None:  # per-env: no baseline of this class, none of a near class, no shared snapshot
            head = (
                f"genguard snapshot {self.last_name!r} has no {base.env_class} baseline "
                f"({self._relative(base.own)}) and nothing to fall back to (no baseline of the same dtype, no shared "
                f"snapshot {source})"
            )
            what = f"the {base.env_class} baseline"
        if can_record:
            return f"{head}; record {what} with: {command}"
        return (
            f"{head}; verify() without prompts= cannot record it: pass prompts= and max_new_tokens= (as for record()) "
            f"and run {command}, or record it with `assert record(...) == genguard_snapshot`"
        )

    def _explain(self, outcome: Outcome, received: str, stored: str) -> list[str]:
        lines = outcome.detail.splitlines()
        if outcome.verdict != "invalid" and str(getattr(self._config.option, "diff_mode", "detailed")) == "detailed":
            lines += ["", *self.extension.json_diff(received, stored)]
        return lines

    def __eq__(self, other: object) -> bool:
        received = serialize_value(other)  # a TypeError saying what genguard_snapshot accepts
        settings = session.settings(self._config)
        index, source = self._assertion.index, self._relative(self.location)
        self.last_name, self.last_source, self.explanation, self.last_comparison = self.name, source, [], None
        refused = self._refuse_nonfinite(other)
        if refused is not None:
            return refused
        if self.per_env:
            return self._per_env_eq(other, received, settings)
        try:
            stored = self.stored_text()
        except OSError as exc:
            return self._unreadable(other, source, exc)
        if stored is None:
            result = self._execute(other, update=settings.snapshot_update)
            if not self._write_failed(result.exception, source):
                return False
            if result.created:
                self._emit("created", f"created {source}", failure=False, file=source)
            else:
                self.explanation = [self._missing(source)]
                self._emit("missing", self.explanation[0], failure=True)
        else:
            outcome = self.extension.outcome(received, stored, source=source)
            self.last_comparison = outcome.comparison
            write = settings.snapshot_update or (settings.update_stale and outcome.verdict == Verdict.STALE.value)
            result = self._execute(other, update=write)
            if not self._write_failed(result.exception, source):
                return False
            if result.updated:
                detail = f"updated {source} (was: {outcome.verdict})\n{outcome.detail}"
                self._emit("updated", detail, failure=False, **_update_fields(outcome, source))
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
            from pytest_genguard.plugin.reference import on_trace

            on_trace(self._config, self._nodeid, index, value, overrides=self.overrides)

    # ------------------------------------------------------------------------------------------------ per-env

    def _baseline(self, env_class: str) -> Baseline:
        """The baseline an `env_class` trace is compared with for the next assertion, and this class's own file."""
        from pytest_genguard.plugin.reference import per_env_location, resolve_baseline

        try:
            own = per_env_location(self.location, env_class)
        except ValueError:
            raise ValueError(
                f"{PER_ENV_OPTION}: genguard snapshot {self.name!r}: the trace's environment gives the class "
                f"{env_class!r}, which cannot key a baseline (it needs trace.environment's device_type, dtype and, on "
                "CUDA, gpu_capability, as record() stores them); record the trace with pytest_genguard.record() or "
                f"run without {PER_ENV_OPTION}"
            ) from None
        path, used = resolve_baseline(self.location, env_class)
        text = self.extension.read_snapshot_data_from_location(
            snapshot_location=str(path), snapshot_name=self.name, session_id=""
        )
        return Baseline(env_class, own, path, used, text, self._relative(path))

    def _per_env_eq(self, other: object, received: str, settings: session.Settings) -> bool:
        """``assert trace == genguard_snapshot`` with ``--genguard-baselines per-env`` (see the module docstring)."""
        index = self._assertion.index
        parsed = parse_snapshot(received, "received data")  # a trace, or a history: its first checkpoint's trace
        first = parsed if isinstance(parsed, GenerationTrace) else (parsed[0].trace if parsed else None)
        base = self._baseline(environment_class(first.environment if first is not None else {}))
        self.last_name, self.last_source, self.explanation, self.last_comparison = self.name, base.source, [], None
        new_only = self._assertion.update_new_snapshots_only
        outcome = None if base.text is None else self.extension.outcome(received, base.text, source=base.source)
        if outcome is None:
            write = settings.snapshot_update or new_only
        elif base.own_exists:
            stale = outcome.verdict == Verdict.STALE.value
            write = not outcome.ok and (settings.snapshot_update or (settings.update_stale and stale))
        else:  # a fallback: --snapshot-update records this class's own baseline, even when the fallback matched
            stale = outcome.verdict == Verdict.STALE.value
            write = settings.snapshot_update or (settings.update_stale and stale) or (new_only and outcome.ok)
        if outcome is not None:
            self.last_comparison = outcome.comparison
        if write:
            self._write_baseline(base, received, outcome)
            ok = True
        elif outcome is None:
            self.explanation = [self._missing(base.source, base=base)]
            self._emit("missing", self.explanation[0], failure=True, **base.event())
            ok = False
        else:
            ok = outcome.ok
            detail = "\n".join(base.annotate(outcome.detail.splitlines()))
            self._emit(outcome.verdict, detail, failure=not ok, outcome=outcome, **base.event())
            if not ok:
                self.explanation = base.annotate(self._explain(outcome, received, base.text or ""))
        self._execute(other, update=False, forced=ok, read_from=base.own if write else base.path)
        self._reference(other, index)
        return ok

    def _write_baseline(self, base: Baseline, text: str, outcome: Outcome | None, **extra: Any) -> None:
        """Write this class's own baseline (atomically), never the fallback it was compared with."""
        from pytest_genguard.core.files import atomic_write_text

        verdict = "updated" if base.own_exists else "created"
        own = self._relative(base.own)
        try:
            atomic_write_text(base.own, text)
        except OSError as exc:
            self.last_source = own
            self._write_failed(exc, own, **base.event())
            raise AssertionError("\n".join(self.explanation)) from None
        head = f"{verdict} {own} (the {base.env_class} baseline"
        detail = f"{head})" if outcome is None else f"{head}; was: {outcome.verdict} against {base.describe()})"
        if outcome is not None and not outcome.ok:
            detail += f"\n{outcome.detail}"
        self.last_source = own
        fields: dict[str, Any] = {"environment_class": base.env_class, "baseline": base.env_class, "baseline_file": own}
        if verdict == "updated" and outcome is not None:
            fields.update(_update_fields(outcome, own))
        self._emit(verdict, detail, failure=False, **fields, **extra)

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
        from pytest_genguard.hf.record import record
        from pytest_genguard.hf.verify import verify_trace

        settings = session.settings(self._config)
        can_record = prompts is not None
        if can_record and max_new_tokens is None:
            raise TypeError("genguard_snapshot.verify(prompts=...): pass max_new_tokens= too, as for record()")
        base = None
        if self.per_env:  # the baseline of the model's environment class (or its fallback)
            from pytest_genguard.hf.environment import environment

            base = self._baseline(environment_class(environment(model)))
        stored_text = self.stored_text() if base is None else base.text
        source = self._relative(self.location) if base is None else base.source
        missing = stored_text is None if base is None else not base.own_exists  # what --snapshot-update-new-only adds
        extra: dict[str, Any] = {"via": "verify", **(base.event() if base is not None else {})}
        self.last_name, self.last_source, self.explanation = self.name, source, []

        def recorded() -> GenerationTrace:
            assert prompts is not None and max_new_tokens is not None
            return record(
                model, tokenizer, prompts, max_new_tokens=max_new_tokens, top_k=top_k, seed=seed, **generate_kwargs
            )

        if can_record and (settings.snapshot_update or (missing and self._assertion.update_new_snapshots_only)):
            trace = recorded()
            self.assert_match(trace)
            return self.last_comparison if self.last_comparison is not None else compare(trace, trace)
        if stored_text is None:
            self.explanation = [self._missing(source, can_record, base)]
            self._emit("missing", self.explanation[0], failure=True, **extra)
            raise AssertionError(self.explanation[0])
        try:
            expected = parse_snapshot(stored_text, source)
        except TraceFormatError as exc:
            rerecord = fix_command("invalid", self._nodeid, self.extension.fix_options)
            self.explanation = [
                str(exc),
                f"This test fails until the file is fixed (it was left unchanged); to re-record it: {rerecord}",
            ]
            self._emit("invalid", "\n".join(self.explanation), failure=True, **extra)
            raise AssertionError("\n".join(self.explanation)) from None
        if not isinstance(expected, GenerationTrace):
            raise TypeError(f"genguard_snapshot.verify(): {source} holds a recorder history; verify() checks traces")
        tol = tolerance_kwargs(self.overrides)
        processors = generate_kwargs.get("logits_processor") or ()  # the custom ones record() was given
        cmp: Comparison = verify_trace(
            model, tokenizer, expected, check_fingerprints=True, logits_processor=processors, **tol
        )
        if can_record and cmp.verdict is not Verdict.STALE:
            requested = _requested(expected, prompts, max_new_tokens, top_k, seed, generate_kwargs)
            changed = compare(expected, requested, **tol)
            if changed.verdict is Verdict.STALE:
                cmp = dataclasses.replace(cmp, verdict=Verdict.STALE, stale_reasons=changed.stale_reasons)
        self._refuse_nonfinite_output(cmp.actual, expected, source, extra)  # NaN would equal NaN: never "identical"
        fix = fix_command(cmp.verdict.value, self._nodeid, self.extension.fix_options)
        outcome = Outcome(cmp.verdict.value, _render(cmp, fix), cmp)
        if outcome.verdict == Verdict.STALE.value and settings.update_stale and can_record:
            trace = recorded()
            self._refuse_nonfinite_output(trace, expected, source, extra)
            if base is None:
                written = self._execute(trace, update=True, forced=False)
                if not self._write_failed(written.exception, source, via="verify"):
                    raise AssertionError("\n".join(self.explanation))
                change = Outcome(outcome.verdict, outcome.detail, compare(expected, trace, **tol))
                detail = f"updated {source} (was: stale)\n{outcome.detail}"
                self._emit("updated", detail, failure=False, via="verify", **_update_fields(change, source))
            else:  # this class's own baseline, never the fallback
                self._write_baseline(base, serialize_value(trace), outcome, via="verify")
                self._execute(trace, update=False, forced=True, read_from=base.own)
            return cmp
        result = self._execute(expected, update=False, forced=outcome.ok, read_from=None if base is None else base.path)
        detail = outcome.detail if base is None else "\n".join(base.annotate(outcome.detail.splitlines()))
        self._emit(outcome.verdict, detail, failure=not result.success, outcome=outcome, **extra)
        if not result.success:
            self.explanation = detail.splitlines()
            raise AssertionError(detail)
        return cmp


@dataclasses.dataclass(frozen=True)
class Baseline:
    """Per-env mode: what one assertion compares with and where it may write."""

    env_class: str
    """The environment class of the trace being asserted."""
    own: Path
    """This class's own baseline: the only file per-env mode writes."""
    path: Path
    """The file compared with: `own`, the nearest other class's baseline, or the shared snapshot."""
    used: str | None
    """The class of `path`; None: the shared snapshot."""
    text: str | None
    """The text of `path`; None when it does not exist (then `path` is the missing shared snapshot)."""
    source: str
    """`path` relative to the rootdir, for messages."""

    @property
    def own_exists(self) -> bool:
        return self.used == self.env_class

    def describe(self) -> str:
        """Which baseline was used, for messages: the class, or the fallback and why."""
        if self.own_exists:
            return f"the {self.env_class} baseline {self.source}"
        fallback = f"the {self.used} baseline" if self.used else "the shared snapshot"
        return f"{fallback} {self.source} (fallback: no {self.env_class} baseline yet)"

    def annotate(self, lines: list[str]) -> list[str]:
        """`lines` with a second line naming the baseline (pytest truncates long explanations from the end)."""
        return [*lines[:1], f"compared with {self.describe()}", *lines[1:]]

    def event(self) -> dict[str, Any]:
        """The `snapshot` event's baseline fields."""
        used = self.used or ("shared fallback" if self.text is not None else None)
        return {"environment_class": self.env_class, "baseline": used, "baseline_file": self.source}


def _update_fields(outcome: Outcome, source: str) -> dict[str, Any]:
    """The extra fields of an ``updated`` event: what the old snapshot was and what the new one changed."""
    return {"was": outcome.verdict, "changes": accepted_changes(outcome), "file": source}


def _render(cmp: Comparison, fix: str | None) -> str:
    from pytest_genguard.core.explain import render
    from pytest_genguard.hf.verify import VerifyComparison

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
    from pytest_genguard.core.trace import PromptTrace
    from pytest_genguard.hf.record import SETTING_KEYS

    prompt_list = [prompts] if isinstance(prompts, str) else list(prompts or [])
    by_text = {p.prompt: p for p in stored.prompts}
    new_prompts = tuple(by_text.get(text, PromptTrace(text, (), (), "length")) for text in prompt_list)
    settings = dict(stored.settings)
    settings.update({"max_new_tokens": max_new_tokens, "record_top_k": top_k, "seed": seed})
    settings.update(
        {k: v for k, v in generate_kwargs.items() if k in SETTING_KEYS and isinstance(v, (int, float, str))}
    )
    return dataclasses.replace(stored, prompts=new_prompts, settings=settings)
