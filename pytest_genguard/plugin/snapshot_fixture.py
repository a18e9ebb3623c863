"""The `genguard_snapshot` fixture object: carries the test's tolerances and decides, in one place (`_check`), what
an assertion compares, whether it writes and what it reports.

Two kinds of *subject* go through that one path: a value (``assert trace == genguard_snapshot``) and a model checked
by teacher forcing (``genguard_snapshot.verify(model, tokenizer, ...)``); and two kinds of *store*
(`pytest_genguard.plugin.stores`): the shared snapshot and, with ``--genguard-baselines per-env``, the baseline of
the trace's environment class. The rule, tolerances, stale detection and update flags are the same for all:

- nothing to compare with: ``--snapshot-update`` (or ``--snapshot-update-new-only``) records it, else it fails;
- the file writes go to exists: it is rewritten only when it does not hold, with ``--snapshot-update`` (a
  regression, an unreadable file) or ``--genguard-update-stale`` (a stale one); a snapshot that holds is never
  rewritten;
- compared with a per-env fallback: ``--snapshot-update`` records this class's own baseline (also when the fallback
  matched), ``--genguard-update-stale`` when stale, ``--snapshot-update-new-only`` when it matched.

Every assertion emits one ``snapshot`` event (`pytest_genguard.core.events.CheckEvent`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_genguard.core import events
from pytest_genguard.core.budget import FidelityReport
from pytest_genguard.core.change import Change, change_of
from pytest_genguard.core.compare import compare
from pytest_genguard.core.comparison import Comparison
from pytest_genguard.core.documents import Outcome, dump_document, parse_document
from pytest_genguard.core.environments import environment_class
from pytest_genguard.core.errors import TraceFormatError
from pytest_genguard.core.events import CheckEvent
from pytest_genguard.core.review import nonfinite_message, nonfinite_values
from pytest_genguard.core.trace import GenerationTrace
from pytest_genguard.core.verdict import Rerecord, Status, Verdict
from pytest_genguard.hf import record as recording_module  # looked up per call: tests replace record()
from pytest_genguard.hf.environment import environment
from pytest_genguard.plugin import distributed, gguf_check, pending, server_check
from pytest_genguard.plugin.fidelity_marker import Judged, between_traces, marker_budget, with_model
from pytest_genguard.plugin.reference import on_trace
from pytest_genguard.plugin.settings import Settings, settings
from pytest_genguard.plugin.snapshot import (
    GenguardSnapshotExtension,
    Plan,
    allows_nonfinite,
    marker_tolerances,
    shared_file_owner,
    tolerance_overrides,
)
from pytest_genguard.plugin.stores import (
    Baseline,
    BaselineStore,
    SharedStore,
    Store,
    Syrupy,
    file_in_the_way,
    per_env_location,
    resolve_baseline,
    write_by_rank_zero,
)
from pytest_genguard.plugin.subjects import Recording, Refused, Subject, Value, Verified

if TYPE_CHECKING:
    from syrupy.assertion import SnapshotAssertion
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["GenguardSnapshot", "assertrepr", "decide_write", "genguard_snapshot_for"]

PER_ENV = "per-env"
PER_ENV_OPTION = "--genguard-baselines per-env"


def decide_write(outcome: Outcome | None, own_exists: bool, settings: Settings, new_only: bool) -> bool:
    """Whether an assertion writes (see the module docstring): `outcome` is None when there was nothing to compare
    with; `own_exists` whether the file writes go to exists."""
    if outcome is None:
        return settings.snapshot_update or new_only
    stale_update = settings.update_stale and outcome.verdict is Verdict.STALE
    if own_exists:
        return not outcome.ok and (settings.snapshot_update or stale_update)
    return settings.snapshot_update or stale_update or (new_only and outcome.ok)


class GenguardSnapshot:
    """The `genguard_snapshot` fixture: ``assert trace == genguard_snapshot`` checks the test's snapshot.

    Missing snapshots fail (``--snapshot-update`` records them); a snapshot that holds within the test's tolerances
    passes and is never rewritten; a regression fails (``--snapshot-update`` rewrites it); a stale snapshot (model,
    tokenizer, settings or prompts changed) fails (``--genguard-update-stale`` or ``--snapshot-update`` rewrites it);
    an unreadable file fails this test only and is left unchanged. Every comparison emits a ``snapshot`` event.
    With ``--genguard-baselines per-env`` the same holds for the baseline of the trace's environment class (see
    `pytest_genguard.plugin.stores`); `location`, `stored_text()` and `load()` still name the shared snapshot.
    """

    __hash__ = None  # type: ignore[assignment]

    def __init__(self, snapshot: SnapshotAssertion, request: pytest.FixtureRequest) -> None:
        self._config = request.config
        self._nodeid = request.node.nodeid
        self._item = request.node
        self.per_env = settings(request.config).baselines == PER_ENV
        self.overrides = tolerance_overrides(request)
        plan = Plan(
            overrides=self.overrides,
            history_overrides=marker_tolerances(request.node),  # ini tolerances are about decoding
            rerecord=Rerecord((self._nodeid,), per_env=self.per_env),
        )
        self._syrupy = Syrupy(snapshot, request.config, plan)
        self.allow_nonfinite = allows_nonfinite(request.node)  # NaN/inf may be stored
        self.budget = marker_budget(request.node)  # @pytest.mark.genguard(fidelity=...): judged by a budget
        self.explanation: list[str] = []
        self.last_name = ""
        self.last_source = ""
        self.last_comparison: Comparison | None = None  # of the last assertion, when both sides were read
        self.last_held = False  # the last assertion compared with a stored snapshot and held (the server is next)
        self.last_pending: str | None = None  # the id of the new trace the last assertion kept for review

    def __repr__(self) -> str:
        if self.last_name:  # pytest shows the fixture in failure tracebacks: name the snapshot that was compared
            return f"<genguard_snapshot {self.last_name!r} ({self.last_source})>"
        return f"<genguard_snapshot {self.name!r} ({self._relative(self.location)})>"

    @property
    def extension(self) -> GenguardSnapshotExtension:
        return self._syrupy.extension

    @property
    def name(self) -> str:
        """The snapshot name the next assertion uses (``test_x``, ``test_x.1``, ``test_x[name]``)."""
        return self._syrupy.name

    @property
    def location(self) -> Path:
        """The shared snapshot file of the next assertion."""
        return self._syrupy.location

    def __call__(self, *, name: str | None = None) -> GenguardSnapshot:
        """Options for the next assertion: `name` stores it as ``<test>[name]`` instead of by position."""
        if name is not None:
            self._syrupy.assertion(name=name)
        return self

    def _relative(self, path: Path) -> str:
        try:
            return str(path.relative_to(self._config.rootpath))
        except ValueError:
            return str(path)

    def stored_text(self) -> str | None:
        """The stored text of the next assertion's shared snapshot (None when it does not exist; OSError when it
        cannot be read)."""
        return self._syrupy.stored_text()

    def load(self) -> Any:
        """The next assertion's stored trace (or history), None when missing; TraceFormatError when unreadable."""
        text = self.stored_text()
        return None if text is None else parse_document(text, self._relative(self.location))

    def _refuse_shared_file(self) -> None:
        """Fail when an earlier test's snapshots go to this test's file where case is ignored (macOS, Windows)."""
        __tracebackhide__ = True
        owner = shared_file_owner(self._item)
        if owner is not None:
            pytest.fail(
                f"genguard snapshot file name clash: {self._nodeid} and {owner} would write one snapshot file "
                f"({self._relative(self.location)}) on file systems that ignore case (macOS, Windows); give one "
                "of them another parametrize id (ids=[...]) so that the two differ in more than case",
                pytrace=False,
            )

    def _rerecord(self, verdict: Verdict | Status) -> str | None:
        return self._syrupy.plan.rerecord.command(verdict)

    # ------------------------------------------------------------------------------------------------ stores

    def _store(self, environment: Any) -> Store:
        """The shared snapshot, or (per-env) the baseline of `environment`'s class."""
        if not self.per_env:
            return SharedStore(self._syrupy, self._relative(self.location))
        return BaselineStore(self._syrupy, self._baseline(environment_class(environment)))

    def _baseline(self, env_class: str) -> Baseline:
        """The baseline an `env_class` trace is compared with for the next assertion, and this class's own file."""
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
        return Baseline(env_class, own, path, used, text, self._relative(path), self._relative(own))

    # ------------------------------------------------------------------------------------------------ the check

    def _emit(self, verdict: Verdict | Status, detail: str, *, failure: bool, **fields: Any) -> None:
        summary = detail.splitlines()[0] if detail else str(verdict)
        event = CheckEvent("snapshot", verdict, failure, summary, detail, self.last_name, **fields)
        events.emit(event)

    def _fail(self, verdict: Verdict | Status, lines: list[str], store: Store, data: Any, **fields: Any) -> bool:
        """A failed assertion: syrupy counts it, nothing is written, the event and the explanation say why."""
        self.explanation = lines
        store.count(data, False)
        self._emit(verdict, "\n".join(lines), failure=True, **store.fields(), **fields)
        return False

    def _missing(self, store: Store, can_record: bool) -> str:
        command = self._rerecord(Status.MISSING)
        head = f"genguard snapshot {self.last_name!r} does not exist ({store.source})"
        what = "it"
        if isinstance(store, BaselineStore):  # per-env: no baseline of this class, none of a near class, no shared one
            base = store.base
            head = (
                f"genguard snapshot {self.last_name!r} has no {base.env_class} baseline ({base.own_source}) and "
                f"nothing to fall back to (no baseline of the same dtype, no shared snapshot {store.source})"
            )
            what = f"the {base.env_class} baseline"
        if can_record:
            return f"{head}; record {what} with: {command}"
        return (
            f"{head}; verify() without prompts= cannot record it: pass prompts= and max_new_tokens= (as for record()) "
            f"and run {command}, or record it with `assert record(...) == genguard_snapshot`"
        )

    def _assert(self, subject: Subject, store: Store) -> bool:
        """`_check`, then the pending trace of the file writes go to: kept by a failed comparison, else cleared."""
        self.last_pending = None
        try:
            return self._check(subject, store)
        finally:
            if self.last_pending is None:
                pending.clear(self._config, store.target)

    def _check(self, subject: Subject, store: Store) -> bool:
        """The one decision path of every assertion: read, compare, decide whether to write, write, keep the new
        trace for review or count, emit."""
        extra: dict[str, Any] = {} if subject.via is None else {"via": subject.via}
        self.last_source, self.explanation, self.last_comparison = store.source, [], None
        self.last_held = False
        try:
            stored = store.read()
        except OSError as exc:  # exists but cannot be read (permissions, a folder in its place): write nothing
            lines = [
                f"genguard snapshot {self.last_name!r} cannot be read ({store.source}): {type(exc).__name__}: {exc}",
                "it was left unchanged; make it readable (or move what is in its place) and run again",
            ]
            return self._fail(Status.INVALID, lines, store, subject.counted(), **extra)
        try:
            outcome = None if stored is None else subject.compare(stored, store.source)
        except Refused as refused:
            return self._fail(Status.NON_FINITE, refused.lines, store, refused.counted, **extra)
        if outcome is not None:
            self.last_comparison = outcome.comparison
            self.last_held = outcome.ok  # by the rule, or by the fidelity budget
        new_only = self._syrupy.new_only
        written: tuple[Any, str] | None = None
        if decide_write(outcome, store.own_exists, settings(self._config), new_only) and subject.can_write:
            try:
                written = subject.written()
            except Refused as refused:
                return self._fail(Status.NON_FINITE, refused.lines, store, refused.counted, **extra)
        # Under torchrun every rank has read the stored snapshot here, and all must agree before rank 0 writes.
        split = distributed.disagreement(
            self.last_name, None if outcome is None else str(outcome.verdict), None if written is None else written[1]
        )
        if split is not None:
            return self._fail(Status.FAILED, split, store, subject.counted(), **extra)
        if written is not None:
            return self._write(store, *written, outcome, subject, extra)
        if outcome is None:
            return self._fail(
                Status.MISSING, [self._missing(store, subject.can_write)], store, subject.counted(), **extra
            )
        detail = "\n".join(store.annotate(outcome.detail.splitlines()))
        fields: dict[str, Any] = {**store.fields(), **extra}
        change = _change(subject, outcome)
        if change is not None:
            fields["change"] = change.to_json()
        if not outcome.ok and outcome.comparison is not None:
            fields.update(expected=outcome.comparison.expected.to_json(), actual=outcome.comparison.actual.to_json())
        store.count(subject.counted(), outcome.ok)
        note = None
        if not outcome.ok:  # a regression or a stale snapshot: its new trace kept for review
            self.last_pending, note = pending.keep(
                self._item,
                subject,
                store,
                outcome,
                stored or "",
                change,
                name=self.last_name,
                allow_nonfinite=self.allow_nonfinite,
                overrides=self.overrides,
                per_env=self.per_env,
            )
        self._emit(outcome.verdict, detail, failure=not outcome.ok, pending=self.last_pending, **fields)
        if not outcome.ok:
            self.explanation = store.annotate(subject.explain(outcome, stored or ""))
            if note is not None:  # second: pytest cuts long explanations from the end
                self.explanation.insert(1, note)
        return outcome.ok

    def _write(
        self, store: Store, data: Any, text: str, outcome: Outcome | None, subject: Subject, extra: dict[str, Any]
    ) -> bool:
        try:
            was = None if outcome is None else str(outcome.verdict)
            written = write_by_rank_zero(store, data, text, was)
        except OSError as exc:
            target = store.source if not isinstance(store, BaselineStore) else store.base.own_source
            self.last_source = target
            blocking = file_in_the_way(self._config.rootpath / target)
            advice = (
                "nothing was written (a snapshot already there is unchanged); make the folder writable (or free "
                "space) and run the same command again"
                if blocking is None
                else f"nothing was written: {self._relative(blocking)} is a file where genguard keeps a folder of "
                "snapshots; move or delete that file and run the same command again"
            )
            self.explanation = [
                f"genguard snapshot {self.last_name!r} could not be written to {target}: {type(exc).__name__}: {exc}",
                advice,
            ]
            self._emit(Status.WRITE_ERROR, "\n".join(self.explanation), failure=True, **store.fields(), **extra)
            return False
        self.last_source = written.file
        detail = written.detail
        if outcome is not None and not outcome.ok:
            detail += f"\n{outcome.detail}"
        fields: dict[str, Any] = {**store.write_fields(), "file": written.file, **extra}
        if written.status is Status.UPDATED and outcome is not None:
            fields.update(was=str(outcome.verdict), changes=tuple(subject.changes(outcome, data)))
        self._emit(written.status, detail, failure=False, **fields)
        return True

    def _server(self, store: Store) -> bool:
        """``--genguard-server`` and ``--genguard-gguf``: the running server and the GGUF judged against the stored
        snapshot too, once the test's own check compared and held (True without the options, or when the assertion
        wrote the snapshot)."""
        current = settings(self._config)
        if not self.last_held or (current.server is None and current.gguf is None):
            return True
        stored = store.read()
        trace = _stored_trace(stored, store.source)
        if stored is None or trace is None:
            return True  # nothing to judge (a history), or the test's own check reported the unreadable file
        for judge in (server_check.judge_stored, gguf_check.judge_stored):
            lines = judge(
                self._config, stored, trace, store.source, self.last_name, overrides=self.overrides, budget=self.budget
            )
            if lines is not None:
                self.explanation = lines
                return False
        return True

    # ------------------------------------------------------------------------------------------------ assert ==

    def __eq__(self, other: object) -> bool:
        self._refuse_shared_file()
        received = dump_document(other)  # a TypeError saying what genguard_snapshot accepts
        index = self._syrupy.index
        self.last_name, self.last_source = self.name, self._relative(self.location)
        diff_mode = str(getattr(self._config.option, "diff_mode", "detailed"))
        subject: Subject = Value(self.extension, other, received, detailed_diff=diff_mode == "detailed")
        if self.budget is not None:
            subject = Judged(subject, between_traces(other, self.budget), lambda: other, self._syrupy.plan.rerecord)
        refused = self.refusal(other, "the trace")
        if refused is not None:  # checked before anything is read: NaN would equal NaN ("identical")
            self.explanation = refused
            self._syrupy.run(other, update=False, forced=False)  # syrupy counts a failed assertion; nothing written
            self._emit(Status.NON_FINITE, "\n".join(refused), failure=True)
            return False
        if self.per_env:  # a trace, or a history: its first checkpoint's trace
            parsed = parse_document(received, "received data")
            first = parsed if isinstance(parsed, GenerationTrace) else (parsed[0].trace if parsed else None)
            store = self._store(first.environment if first is not None else {})
        else:
            store = self._store(None)
        ok = self._assert(subject, store) and self._server(store)
        self._reference(other, index)
        return ok

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def assert_match(self, data: Any) -> None:
        """``assert data == genguard_snapshot`` that explains itself without pytest's assertion rewriting."""
        __tracebackhide__ = True
        if not self.__eq__(data):
            raise AssertionError("\n".join(self.explanation))

    def refusal(self, value: Any, what: str, source: str | None = None) -> list[str] | None:
        """The refusal text for NaN/inf in `value` (None when it has none, or the test opted in)."""
        if self.allow_nonfinite:
            return None
        count, where = nonfinite_values(value)
        if not count:
            return None
        return nonfinite_message(self.last_name, source or self.last_source, count, where, received=what)

    def _reference(self, value: Any, index: int | str) -> None:
        """Hand traces to the cross-environment reference workflow (a no-op without its options)."""
        current = settings(self._config)
        if isinstance(value, GenerationTrace) and (current.reference or current.record_reference):
            on_trace(self._config, self._nodeid, index, value, overrides=self.overrides)

    # ------------------------------------------------------------------------------------------------ verify

    def verify(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        prompts: Any = None,
        *,
        max_new_tokens: int | None = None,
        top_k: int = 5,
        seed: int | None = None,
        **generate_kwargs: Any,
    ) -> Comparison | FidelityReport:
        """Check this test's stored trace against `model` by teacher forcing, without re-generating it.

        The snapshot rule applies: a changed model or tokenizer fingerprint makes the snapshot stale. With `prompts`
        (and `max_new_tokens`, `top_k`, `seed`, generate kwargs as for `record()`), the snapshot can also be
        recorded: a missing one with ``--snapshot-update``, a stale one with ``--genguard-update-stale``; changed
        arguments make the snapshot stale. Raises AssertionError (explained) when the check fails. Under
        ``@pytest.mark.genguard(fidelity=...)`` the stored trace is judged by the budget instead and the
        `FidelityReport` is returned (see `pytest_genguard.plugin.fidelity_marker`).
        """
        __tracebackhide__ = True
        if prompts is not None and max_new_tokens is None:
            raise TypeError("genguard_snapshot.verify(prompts=...): pass max_new_tokens= too, as for record()")
        self._refuse_shared_file()
        recording = Recording(prompts, max_new_tokens, top_k, seed, generate_kwargs)
        store = self._store(environment(model) if self.per_env else None)
        self.last_name = self.name
        missing = (store.read() is None) if not self.per_env else not store.own_exists
        new_only = missing and self._syrupy.new_only
        if recording.can_record and (settings(self._config).snapshot_update or new_only):
            trace = recording.record(recording_module.record, model, tokenizer)  # re-recorded and checked as a value
            self.assert_match(trace)
            return self.last_comparison if self.last_comparison is not None else compare(trace, trace)
        record = recording_module.record
        subject = Verified(
            model, tokenizer, recording, record, self.overrides, self._syrupy.plan.rerecord, self.refusal
        )
        if self.budget is not None:  # the stored paths, teacher forced through the candidate: judged by the budget
            judged = Judged(subject, with_model(model, tokenizer, self.budget), lambda: None, subject.rerecord)
            if not (self._assert(judged, store) and self._server(store)):
                raise AssertionError("\n".join(self.explanation))
            return judged.report if judged.report is not None else compare(subject.counted(), subject.counted())
        if not (self._assert(subject, store) and self._server(store)):
            raise AssertionError("\n".join(self.explanation))
        if subject.comparison is None:  # written (recorded for the first time): nothing was compared
            return compare(subject.counted(), subject.counted())
        return subject.comparison


def genguard_snapshot_for(snapshot: SnapshotAssertion, request: pytest.FixtureRequest) -> GenguardSnapshot:
    """The `genguard_snapshot` fixture value for this test."""
    return GenguardSnapshot(snapshot, request)


def assertrepr(op: str, left: object, right: object) -> list[str] | None:
    """The failure explanation for ``x == genguard_snapshot`` (called by the plugin's pytest_assertrepr_compare)."""
    for snap, other in ((right, left), (left, right)):
        if op == "==" and isinstance(snap, GenguardSnapshot) and snap.explanation:
            head = f"{type(other).__name__} == genguard_snapshot {snap.last_name!r} ({snap.last_source})"
            return [head, *snap.explanation]
    return None


def _stored_trace(stored: str | None, source: str) -> GenerationTrace | None:
    """The stored snapshot's trace, for the deployed copies to be judged against (None: no file, a recorder history,
    or a file the test's own check already reported unreadable)."""
    if stored is None:
        return None
    try:
        document = parse_document(stored, source)
    except TraceFormatError:
        return None
    return document if isinstance(document, GenerationTrace) else None


def _change(subject: Subject, outcome: Outcome) -> Change | None:
    """What the comparison found changed, with the KLD where the check computed one (each step's value on failure,
    for the report's pictures); None when nothing was compared."""
    kld = subject.kld(per_step=not outcome.ok)
    if outcome.comparison is not None:
        return change_of(outcome.comparison, kld)
    if kld is not None:  # a fidelity judgement of a model in process: its steps, no second trace
        return Change(kld.prompts, (), outcome.summary, kld)
    return None
