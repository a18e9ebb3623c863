"""What a `genguard_snapshot` assertion checks, its *subject*: a value (``assert trace == genguard_snapshot``: its own
text is compared and written) or a model checked by teacher forcing (``genguard_snapshot.verify(model, ...)``: the
stored trace is verified, and written by recording it again). Both go through the fixture's one decision path
(`snapshot_fixture.GenguardSnapshot._check`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Protocol

from pytest_genguard.core import events
from pytest_genguard.core.bisect_hint import with_bisect_hint
from pytest_genguard.core.change import Kld, kld_of
from pytest_genguard.core.compare import compare
from pytest_genguard.core.comparison import Comparison
from pytest_genguard.core.documents import Outcome, stored_trace
from pytest_genguard.core.fidelity import trace_fidelity
from pytest_genguard.core.review import accepted_changes
from pytest_genguard.core.tolerances import Overrides
from pytest_genguard.core.trace import GenerationTrace, PromptTrace
from pytest_genguard.core.verdict import Rerecord, Status, Verdict
from pytest_genguard.hf import prompt_forms
from pytest_genguard.hf.decoding_settings import other_settings, requested_settings
from pytest_genguard.hf.verify import verify
from pytest_genguard.plugin.snapshot import GenguardSnapshotExtension

__all__ = ["Recording", "Refused", "Subject", "Value", "Verified"]


class Refused(Exception):
    """Data with NaN/inf without ``@pytest.mark.genguard(allow_nonfinite=True)``: neither recorded nor compared."""

    def __init__(self, lines: list[str], counted: Any) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines
        self.counted = counted


class Subject(Protocol):
    """What one assertion checks against the store."""

    @property
    def via(self) -> str | None:
        """How the check was made, for its event ("verify"; None for a plain assertion)."""

    @property
    def can_write(self) -> bool:
        """Whether this subject can give what to write (verify() without prompts cannot)."""

    def counted(self) -> Any:
        """The data syrupy is given to count the assertion."""

    def compare(self, stored: str, source: str) -> Outcome:
        """The outcome against the stored text (may raise `Refused`)."""

    def written(self) -> tuple[Any, str]:
        """(data, text) to write (may raise `Refused`); only called when `can_write`."""

    def explain(self, outcome: Outcome, stored: str) -> list[str]:
        """The failure explanation."""

    def changes(self, outcome: Outcome, data: Any) -> list[str]:
        """What writing `data` over the snapshot that gave `outcome` accepted (for the summary)."""

    def kld(self, *, per_step: bool) -> Kld | None:
        """The KLD of the new model on the recorded paths, when this check computed one (`per_step`: keep each
        step's value, for the report's pictures)."""


class Value:
    """``assert value == genguard_snapshot``: the value's own text is compared and written."""

    def __init__(self, extension: GenguardSnapshotExtension, value: Any, received: str, *, detailed_diff: bool) -> None:
        self.extension, self.value, self.received, self.detailed_diff = extension, value, received, detailed_diff
        self.via: str | None = None
        self.can_write = True

    def counted(self) -> Any:
        return self.value

    def compare(self, stored: str, source: str) -> Outcome:
        return self.extension.outcome(self.received, stored, source=source)

    def written(self) -> tuple[Any, str]:
        return self.value, self.received

    def explain(self, outcome: Outcome, stored: str) -> list[str]:
        lines = outcome.detail.splitlines()
        if outcome.verdict is not Status.INVALID and self.detailed_diff:
            lines += ["", *self.extension.json_diff(self.received, stored)]
        return lines

    def changes(self, outcome: Outcome, data: Any) -> list[str]:
        return accepted_changes(outcome)

    def kld(self, *, per_step: bool) -> Kld | None:
        return None  # two generated traces: no KLD past the first split, and none asked for


@dataclasses.dataclass(frozen=True)
class Recording:
    """The record() arguments a verify() call was given (none: it cannot record)."""

    prompts: Any
    """As record() takes them: text, token ids, conversations (None: it cannot record)."""
    max_new_tokens: int | None
    top_k: int
    seed: int | None
    generate_kwargs: dict[str, Any]

    @property
    def can_record(self) -> bool:
        return self.prompts is not None

    def record(self, record: Any, model: Any, tokenizer: Any) -> GenerationTrace:
        trace: GenerationTrace = record(
            model,
            tokenizer,
            self.prompts,
            max_new_tokens=self.max_new_tokens,
            top_k=self.top_k,
            seed=self.seed,
            **self.generate_kwargs,
        )
        return trace

    def requested(self, stored: GenerationTrace, model: Any, tokenizer: Any) -> GenerationTrace:
        """The stored trace with the prompts and settings this call asks for, to detect changed test arguments
        (`model`'s generation config is what record() starts from). The prompts are encoded as record() encodes
        them (texts, token ids, conversations with ``chat_template_kwargs``), so each is found by the text the trace
        keeps for it."""
        where = "genguard_snapshot.verify()"
        kwargs = dict(self.generate_kwargs)
        texts, forms = prompt_forms.checked(self.prompts, where=where)
        chat: dict[str, Any] = {}
        if forms is not None:
            template = prompt_forms.chat_kwargs(kwargs.pop(prompt_forms.CHAT_SETTING, None), forms, where=where)
            encoded = prompt_forms.encode(tokenizer, forms, template, where=where)
            texts, chat = encoded.texts, encoded.settings
        by_text = {p.prompt: p for p in stored.prompts}
        new_prompts = tuple(by_text.get(text, PromptTrace(text, (), (), "length")) for text in texts)
        stored_others = other_settings(stored.settings)
        kept = (k for k in stored.settings if k not in stored_others and k != prompt_forms.CHAT_SETTING)
        changed = {k: stored.settings[k] for k in kept}
        others, known = requested_settings(model.generation_config, kwargs)
        changed.update(others)
        changed.update({"max_new_tokens": self.max_new_tokens, "record_top_k": self.top_k, "seed": self.seed})
        changed.update(known)
        changed.update(chat)
        return dataclasses.replace(stored, prompts=new_prompts, settings=changed)


class Verified:
    """``genguard_snapshot.verify(model, ...)``: the stored trace checked by teacher forcing; written (when it may
    be) by recording it again."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        recording: Recording,
        record: Any,
        overrides: Overrides,
        rerecord: Rerecord,
        refusal: Callable[..., list[str] | None],
    ) -> None:
        self.model, self.tokenizer, self.recording, self.record = model, tokenizer, recording, record
        self.overrides, self.rerecord, self.refusal = overrides, rerecord, refusal
        self.via: str | None = "verify"
        self.can_write = recording.can_record
        self.stored: GenerationTrace | None = None
        self.comparison: Comparison | None = None

    def counted(self) -> Any:
        return self.stored if self.stored is not None else GenerationTrace(prompts=())

    def compare(self, stored: str, source: str) -> Outcome:
        expected = stored_trace(
            stored, source, self.rerecord, where="genguard_snapshot.verify()", does="verify() checks traces"
        )
        if isinstance(expected, Outcome):
            return expected
        self.stored = expected
        processors = self.recording.generate_kwargs.get("logits_processor") or ()  # the ones record() was given
        with events.muted():  # the snapshot event below is this check's only event
            cmp: Comparison = verify(
                self.model,
                self.tokenizer,
                expected,
                check_fingerprints=True,
                logits_processor=processors,
                **self.overrides.args(),
            )
        if self.recording.can_record and cmp.verdict is not Verdict.STALE:
            requested = self.recording.requested(expected, self.model, self.tokenizer)
            changed = compare(expected, requested, **self.overrides.args())
            if changed.verdict is Verdict.STALE:
                cmp = dataclasses.replace(cmp, verdict=Verdict.STALE, stale_reasons=changed.stale_reasons)
        refused = self.refusal(cmp.actual, "the model's output", source)  # NaN would equal NaN: never "identical"
        if refused is not None:
            raise Refused(refused, expected)
        self.comparison = cmp
        fix = self.rerecord.command(cmp.verdict)
        detail = cmp.render(fix)
        return Outcome(cmp.verdict, with_bisect_hint(detail, cmp, self.rerecord.targets), cmp)

    def written(self) -> tuple[Any, str]:
        trace = self.recording.record(self.record, self.model, self.tokenizer)
        refused = self.refusal(trace, "the model's output")
        if refused is not None:
            raise Refused(refused, self.counted())
        return trace, trace.to_json()

    def explain(self, outcome: Outcome, stored: str) -> list[str]:
        return outcome.detail.splitlines()

    def changes(self, outcome: Outcome, data: Any) -> list[str]:
        if self.stored is None or not isinstance(data, GenerationTrace):
            return accepted_changes(outcome)
        recorded = compare(self.stored, data, **self.overrides.args())
        return accepted_changes(Outcome(outcome.verdict, outcome.detail, recorded))

    def kld(self, *, per_step: bool) -> Kld | None:
        """The lower bound from the recorded top-k along the stored path, up to where the model prefers another
        token (the teacher-forced trace ends there)."""
        if self.comparison is None:
            return None
        steps, _, _ = trace_fidelity(self.comparison.expected, self.comparison.actual)
        return kld_of(steps, per_step=per_step) if steps else None
