"""What a snapshot or a trace file holds, a *document*: a `GenerationTrace` or a recorder history. Reading and writing
either from its text, and the one comparison of two documents (`compare_documents`), with the rule for histories:
checkpoint by checkpoint, bitwise in the environment that recorded them and under the training tolerance
elsewhere. The snapshot fixture, the syrupy extension and `genguard
diff` all judge through it. Standard library only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pytest_genguard.core.bisect_hint import with_bisect_hint
from pytest_genguard.core.compare import compare
from pytest_genguard.core.comparison import Comparison, render
from pytest_genguard.core.environments import same_environment
from pytest_genguard.core.errors import TraceFormatError
from pytest_genguard.core.history import Checkpoint, RecorderHistory, history_from_json, history_to_json
from pytest_genguard.core.text import number
from pytest_genguard.core.tolerances import EXACT, TRAINING, TRAINING_LOSS, Overrides, Tolerances
from pytest_genguard.core.trace import GenerationTrace
from pytest_genguard.core.verdict import Rerecord, Status, Verdict, worst

__all__ = [
    "Document",
    "Outcome",
    "compare_documents",
    "dump_document",
    "history_of",
    "invalid_outcome",
    "parse_document",
    "stored_trace",
    "training_tolerances",
]

Document = GenerationTrace | RecorderHistory

_ACCEPTS = (
    "genguard_snapshot compares a GenerationTrace (from pytest_genguard.record()) or a GenerationRecorder history "
    "(recorder.history); use syrupy's plain `snapshot` fixture for other data"
)


def history_of(value: Any) -> RecorderHistory | None:
    """The checkpoints of a recorder history: a `GenerationRecorder` (its `.history`) or a list of `Checkpoint`s;
    None for anything else. (The recorder is told by what it holds: it lives in `pytest_genguard.hf`.)"""
    history = getattr(value, "history", value)
    if isinstance(history, list) and all(isinstance(c, Checkpoint) for c in history):
        return history if isinstance(history, RecorderHistory) else RecorderHistory(history)
    return None


def dump_document(value: Any) -> str:
    """The text of a trace or a recorder history; TypeError (saying what is accepted) for anything else."""
    if isinstance(value, GenerationTrace):
        return value.to_json()
    history = history_of(value)
    if history is not None:
        return history_to_json(history)
    raise TypeError(f"{_ACCEPTS}; got {type(value).__name__}")


def parse_document(text: str, source: str) -> Document:
    """A `GenerationTrace` or a `RecorderHistory` from its text; TraceFormatError naming `source` if it is bad."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:  # bytes that are not UTF-8 were read as lone surrogates
        raise TraceFormatError(
            f"{source}: not UTF-8 text (invalid byte at offset {exc.start}); the file is corrupt: restore it from "
            "version control or re-record it (pytest --snapshot-update)."
        ) from None
    conflict = _conflict_line(text)
    if conflict is not None:
        raise TraceFormatError(
            f"{source}: unresolved git merge conflict (conflict markers from line {conflict}): both branches changed "
            "this snapshot. Do not merge the JSON by hand: keep one side whole (git checkout --ours or --theirs "
            "-- <file>) and re-record it on the merged code (pytest --snapshot-update <test>)."
        )
    if '"genguard_history"' in text[:200]:
        return history_from_json(text, source=source)
    if text.strip() and '"schema"' not in text:
        raise TraceFormatError(
            f'{source}: not a genguard trace or recorder history (it has no "schema" key): genguard reads the '
            "files pytest-genguard writes (the .genguard snapshots, GenerationTrace.to_json())."
        )
    return GenerationTrace.from_json(text, source=source)


def _conflict_line(text: str) -> int | None:
    """The line of the first git conflict marker when `text` holds a whole conflict (<<<<<<<, =======, >>>>>>>)."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("<<<<<<< ") or line == "<<<<<<<"]
    if not starts:
        return None
    rest = lines[starts[0] :]
    if "=======" in rest and any(line.startswith(">>>>>>>") for line in rest):
        return starts[0] + 1
    return None


@dataclass(frozen=True)
class Outcome:
    """One comparison of received data with a stored document: the verdict and the text that explains it.

    `verdict` is a `Verdict`, or `Status.INVALID` when the stored text cannot be read.
    """

    verdict: Verdict | Status
    detail: str
    comparison: Comparison | None = None

    @property
    def ok(self) -> bool:
        return isinstance(self.verdict, Verdict) and self.verdict.ok

    @property
    def summary(self) -> str:
        return self.detail.splitlines()[0] if self.detail else str(self.verdict)


def compare_documents(
    received: str,
    stored: str,
    *,
    overrides: Overrides = Overrides(),
    history_overrides: Overrides | None = None,
    source: str = "snapshot",
    rerecord: Rerecord = Rerecord(),
) -> Outcome:
    """Compare received text with stored text under the tolerant rule (traces: `compare()` with `overrides` on the
    dtype defaults; histories: the training tolerance with `history_overrides` on top, `overrides` when None: the
    ini tolerances are about decoding). `rerecord` makes the fix commands of the explanation."""
    try:
        expected = parse_document(stored, source)
    except TraceFormatError as exc:
        return invalid_outcome(exc, rerecord)
    actual = parse_document(received, "received data")
    if isinstance(expected, GenerationTrace) and isinstance(actual, GenerationTrace):
        cmp = compare(expected, actual, **overrides.args())
        detail = with_bisect_hint(render(cmp, fix=rerecord.command(cmp.verdict)), cmp, rerecord.targets)
        return Outcome(cmp.verdict, detail, cmp)
    if isinstance(expected, RecorderHistory) and isinstance(actual, RecorderHistory):
        training = overrides if history_overrides is None else history_overrides
        return _compare_histories(expected, actual, training, rerecord)
    kinds = {True: "a GenerationTrace", False: "a recorder history"}
    detail = (
        f"stale: {source} holds {kinds[isinstance(expected, GenerationTrace)]} but the test now compares "
        f"{kinds[isinstance(actual, GenerationTrace)]}; if intended, re-record with: "
        f"{rerecord.command(Verdict.STALE)}"
    )
    return Outcome(Verdict.STALE, detail)


def invalid_outcome(error: TraceFormatError, rerecord: Rerecord) -> Outcome:
    """The outcome of a stored document that cannot be read: it fails, and is left as it is."""
    return Outcome(
        Status.INVALID,
        f"{error}\nThis test fails until the file is fixed (it was left unchanged); to re-record only this snapshot: "
        f"{rerecord.command(Status.INVALID)}",
    )


def stored_trace(stored: str, source: str, rerecord: Rerecord, *, where: str, does: str) -> GenerationTrace | Outcome:
    """A stored snapshot a check needs as a trace: the trace, or the failing outcome of a file that cannot be read
    (`invalid_outcome`). A recorder history there is the caller's mistake: a TypeError naming `where` and what it
    `does` with traces."""
    try:
        document = parse_document(stored, source)
    except TraceFormatError as exc:
        return invalid_outcome(exc, rerecord)
    if not isinstance(document, GenerationTrace):
        raise TypeError(f"{where}: {source} holds a recorder history; {does}")
    return document


def training_tolerances(overrides: Overrides, *, same_env: bool = False) -> Tolerances:
    """The tolerances a recorder history is compared with: bitwise (`EXACT`) when both were recorded in the same
    environment, where training is bitwise reproducible (measured: genguard's recipes on one machine give the same
    weights and the same history text), else `TRAINING`; the test's overrides on top."""
    return overrides.on(EXACT if same_env else TRAINING)


def _describe_training(tolerances: Tolerances, same_env: bool) -> str:
    if same_env:
        return f"same environment: logprobs {tolerances}, loss bitwise"
    return f"training tolerance: logprobs {tolerances}; loss atol {TRAINING_LOSS.atol:g}, rtol {TRAINING_LOSS.rtol:g}"


def _same_environment(expected: Sequence[Checkpoint], actual: Sequence[Checkpoint]) -> bool:
    """Whether two histories come from one environment: every pair of checkpoint traces does."""
    return bool(expected) and all(
        same_environment(e.trace.environment, a.trace.environment) for e, a in zip(expected, actual, strict=True)
    )


def _compare_histories(
    expected: Sequence[Checkpoint], actual: Sequence[Checkpoint], overrides: Overrides, rerecord: Rerecord
) -> Outcome:
    """Checkpoint by checkpoint under the training tolerance (training on another CPU amplifies rounding; see
    `tolerances.TRAINING`): the schedule (step, event) must match (else stale), each trace via compare()."""
    schedule_e = [(c.step, c.event) for c in expected]
    schedule_a = [(c.step, c.event) for c in actual]
    if schedule_e != schedule_a:
        detail = (
            f"stale: the recorder's checkpoints changed: {schedule_e} -> {schedule_a} (step, event); if intended, "
            f"re-record with: {rerecord.command(Verdict.STALE)}"
        )
        return Outcome(Verdict.STALE, detail)
    same_env = _same_environment(expected, actual)
    tolerances = training_tolerances(overrides, same_env=same_env)
    loss_tolerances = EXACT if same_env else TRAINING_LOSS
    comparisons = [compare(e.trace, a.trace, tolerances=tolerances) for e, a in zip(expected, actual, strict=True)]
    loss_notes = [
        f"checkpoint {i} (step {e.step}): loss {number(e.loss, 6)} -> {number(a.loss, 6)}"
        for i, (e, a) in enumerate(zip(expected, actual, strict=True))
        if e.loss is not None and a.loss is not None and not loss_tolerances.close(e.loss, a.loss)
    ]
    if not comparisons:
        return Outcome(Verdict.IDENTICAL, "identical (no checkpoints)")
    found = worst(c.verdict for c in comparisons)
    index = next(i for i, c in enumerate(comparisons) if c.verdict is found)  # the first of the worst
    cmp = comparisons[index]
    verdict = worst([found, Verdict.REGRESSION]) if loss_notes else found
    where = f"checkpoint {index} (step {expected[index].step}, {expected[index].event})"
    head = (
        f"{verdict.value}: {len(expected)} checkpoints, worst at {where} ({_describe_training(tolerances, same_env)})"
    )
    lines = [head, *(["training loss beyond tolerance: " + "; ".join(loss_notes)] if loss_notes else [])]
    lines += ["", f"{where}:", render(cmp, fix=rerecord.command(verdict))]
    return Outcome(verdict, "\n".join(lines), cmp)
