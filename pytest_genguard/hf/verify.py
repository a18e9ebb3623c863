"""`verify()`: re-check a recorded trace by teacher forcing instead of re-generating it.

`pytest_genguard.hf.teacher` computes what the model gives along the recorded paths (one forward pass per batch, the
recorded logits processors re-applied to all steps at once); the result, an "actual" `GenerationTrace` with the recorded
structure, is compared with `compare()`.

Semantics, chosen on purpose:
- verify() answers "does *this* model still produce this trace?". It compares values (``check_fingerprints=False``)
  and reports a changed model or tokenizer fingerprint in `VerifyComparison.fingerprint_diff`
  (``model.weights_hash: old -> new``) instead of a STALE verdict. (The snapshot fixture's
  `genguard_snapshot.verify()` applies the snapshot rule instead: a changed model makes the snapshot stale.)
- greedy traces: where the teacher-forced argmax of the processed scores differs from the recorded token, the model
  now prefers another token; the actual trace takes that token and ends there, exactly as re-generation would
  diverge, so the comparison names the step, the recorded token, the now-preferred token and both logprobs.
- sampled traces: the recorded (sampled) tokens are kept; the chosen tokens' raw logprobs and processed scores are
  compared (a token that a processor now masks gets score -inf, a regression).
- beam-search traces (``settings["mode"] == "beam"``) cannot be teacher forced step by step (beams reorder); verify()
  falls back to re-generation with `record()` and says so with a `VerifyFallbackWarning`; so does a model with
  dynamically quantized modules (`teacher.per_call_quantization`), whose activations are quantized per call.
- traces recorded with custom logits processors (``settings["logits_processor"]``, their class names) need the same
  processors passed to verify(): a trace holds their names, not the objects, so verify() raises ValueError rather
  than teacher force without them (which would call every re-ranked step a regression).
"""

from __future__ import annotations

import copy
import dataclasses
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Unpack

from pytest_genguard.core.compare import compare
from pytest_genguard.core.comparison import Comparison
from pytest_genguard.core.errors import VerifyFallbackWarning
from pytest_genguard.core.events import CheckEvent, emit
from pytest_genguard.core.jsontext import JSONScalar
from pytest_genguard.core.tolerances import ToleranceArgs
from pytest_genguard.core.trace import GenerationTrace
from pytest_genguard.hf import prompt_forms
from pytest_genguard.hf._generation import SETTING_KEYS, int_setting, processor_names
from pytest_genguard.hf.decoding_settings import other_settings
from pytest_genguard.hf.record import record
from pytest_genguard.hf.teacher import Preference, per_call_quantization, teacher_force_with_preferences

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = [
    "Preference",
    "VerifyComparison",
    "comparison_event",
    "fingerprint_changes",
    "verify",
]


def verify(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    trace: GenerationTrace,
    *,
    logits_processor: Sequence[Any] | None = None,
    check_fingerprints: bool = False,
    **tolerances: Unpack[ToleranceArgs],
) -> VerifyComparison:
    """Re-check `trace` against `model` by teacher forcing; truthy when the model still produces it.

    Tolerances default to the dtype defaults of `compare()`; `atol`/`rtol`/`tie_tol` override single fields. A
    changed model or tokenizer fingerprint is reported in the comparison (``fingerprint_diff``), not as a verdict;
    `check_fingerprints=True` applies the snapshot rule instead (a changed model makes the trace stale).
    A trace recorded with custom processors (``record(..., logits_processor=...)``, named in its settings) needs the
    same processors here: they are re-applied on the teacher-forced logits; without them verify() raises ValueError
    (the processed scores could not be reproduced, and every step would look regressed).
    Inside a test the result is also counted in the genguard terminal summary (a ``verify`` event).
    """
    if not isinstance(trace, GenerationTrace):
        raise TypeError(
            f"verify(): trace must be a GenerationTrace (from record() or GenerationTrace.from_json()), "
            f"got {type(trace).__name__}"
        )
    custom = _custom_processors(trace, logits_processor)
    others = sorted(other_settings(trace.settings))
    per_call = per_call_quantization(model)
    regenerated = trace.settings.get("mode") == "beam" or bool(others) or per_call is not None
    preferences: tuple[Preference, ...] = ()
    if regenerated:
        why = (
            "beam-search traces cannot be teacher forced (beams are reordered at every step)"
            if trace.settings.get("mode") == "beam"
            else per_call or f"teacher forcing does not re-apply the trace's settings {', '.join(others)}"
        )
        warnings.warn(
            f"verify(): {why}; re-generating with record() instead, which is as slow as recording.",
            VerifyFallbackWarning,
            stacklevel=2,
        )
        actual = _regenerate(model, tokenizer, trace, custom)
    else:
        actual, preferences = teacher_force_with_preferences(model, tokenizer, trace, logits_processor=custom)
    cmp = compare(trace, actual, check_fingerprints=check_fingerprints, **tolerances)
    fields = {f.name: getattr(cmp, f.name) for f in dataclasses.fields(cmp)}
    changed = () if check_fingerprints else fingerprint_changes(trace, actual)
    result = VerifyComparison(**fields, preferences=preferences, regenerated=regenerated, fingerprint_diff=changed)
    emit(comparison_event(result, name="verify"))
    return result


@dataclasses.dataclass(frozen=True)
class VerifyComparison(Comparison):
    """A `Comparison` from `verify()`, plus where a greedy path would now change and whether it was re-generated."""

    preferences: tuple[Preference, ...] = ()
    regenerated: bool = False
    fingerprint_diff: tuple[tuple[str, JSONScalar, JSONScalar], ...] = ()
    """Changed model/tokenizer fingerprint fields (``("model.weights_hash", old, new)``), with
    `check_fingerprints=False`: reported, not judged. `environment_diff` holds environment fields only."""

    def differences(self) -> tuple[tuple[str, JSONScalar, JSONScalar], ...]:
        """The changed fingerprints first, then the environment fields, under "environment differs"."""
        return self.fingerprint_diff + self.environment_diff

    def notes(self) -> list[str]:
        """Lines that follow the summary line: the now-preferred tokens, the beam-search fallback."""
        lines = [str(p) for p in self.preferences[:3]]
        if len(self.preferences) > 3:
            lines.append(f"... and {len(self.preferences) - 3} more prompts whose greedy path would change")
        if self.regenerated:
            lines.append("verified by re-generation: beam search, or settings teacher forcing does not re-apply")
        return lines

    def render(self, fix: str | None = None) -> str:
        """The explanation of `comparison.render` with the notes after its summary line."""
        first, _, rest = super().render(fix).partition("\n")
        return "\n".join([first, *self.notes(), *([rest] if rest else [])])


def fingerprint_changes(
    expected: GenerationTrace, actual: GenerationTrace
) -> tuple[tuple[str, JSONScalar, JSONScalar], ...]:
    """Changed model/tokenizer fingerprint fields as ``(name, old, new)``, e.g. ``("model.weights_hash", a, b)``."""
    out: list[tuple[str, JSONScalar, JSONScalar]] = []
    for prefix, old, new in (
        ("model", expected.model, actual.model),
        ("tokenizer", expected.tokenizer, actual.tokenizer),
    ):
        if old is None or new is None:
            continue
        for key, value in old.__dict__.items():
            if new.__dict__.get(key) != value:
                out.append((f"{prefix}.{key}", value, new.__dict__.get(key)))
    return tuple(out)


def comparison_event(cmp: Comparison, *, name: str, fix: str | None = None) -> CheckEvent:
    """The ``verify`` event for a comparison: verdict, failure, summary, detail, both traces on failure."""
    detail = cmp.render(fix)
    failed = not cmp.ok
    return CheckEvent(
        "verify",
        cmp.verdict,
        failed,
        detail.splitlines()[0] if detail else str(cmp.verdict),
        detail,
        name,
        expected=cmp.expected.to_json() if failed else None,
        actual=cmp.actual.to_json() if failed else None,
    )


def _custom_processors(trace: GenerationTrace, given: Sequence[Any] | None) -> list[Any]:
    """The user's processors for re-applying, checked against the class names the trace recorded."""
    recorded = trace.settings.get("logits_processor")
    names = processor_names(given)
    if recorded and given is None:
        raise ValueError(
            f"verify(): the trace was recorded with custom logits processors ({recorded}) that verify() cannot "
            "rebuild from the trace; pass the same processors: verify(model, tokenizer, trace, "
            "logits_processor=[...]), or compare a fresh record(..., logits_processor=[...]) with the snapshot."
        )
    if names != (recorded or None):
        raise ValueError(
            f"verify(): logits_processor names {names or 'none'} but the trace was recorded with "
            f"{recorded or 'no custom logits processors'}; pass the processors the trace was recorded with."
        )
    return list(given or [])


def _regenerate(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, trace: GenerationTrace, custom: Sequence[Any] = ()
) -> GenerationTrace:
    """Re-record `trace`'s prompts with its settings (the beam-search fallback)."""
    from transformers import LogitsProcessorList

    settings = dict(trace.settings)
    kwargs: dict[str, Any] = {
        k: settings[k] for k in SETTING_KEYS if settings.get(k) is not None and k != "max_new_tokens"
    }
    kwargs.update(other_settings(settings))
    if "top_k" in kwargs:  # a sampling top-k goes in a generation config: record()'s top_k is the recorded top-k
        config = copy.deepcopy(model.generation_config)
        config.top_k = kwargs.pop("top_k")
        kwargs["generation_config"] = config
    seed = settings.get("seed")
    prompts, chat = prompt_forms.recorded_forms(trace)
    if chat is not None:
        kwargs["chat_template_kwargs"] = chat
    return record(
        model,
        tokenizer,
        prompts,
        max_new_tokens=int_setting(settings.get("max_new_tokens"), max(len(p.steps) for p in trace.prompts)),
        top_k=int_setting(settings.get("record_top_k"), 5),
        seed=seed if isinstance(seed, int) and not isinstance(seed, bool) else None,
        **({"logits_processor": LogitsProcessorList(custom)} if custom else {}),
        **kwargs,
    )
