"""`Comparison`, the result of `compare()`, and its failure text: what a person reads when a decoding test fails.

Layout, most important first (pytest truncates long assertion explanations, so the one-line summary leads):

1. one sentence: the verdict and the first divergence (`summary_line`);
2. a window of steps around the divergence, expected and actual side by side, the divergent step marked ``>>``;
3. error statistics over the compared values and the tolerances used;
4. divergences in other prompts, differing environment fields;
5. the command that fixes it if the change is intended.

Tokens are quoted with `text.quote`. Pure standard library.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pytest_genguard.core.jsontext import JSONScalar
from pytest_genguard.core.text import escape_char, number, pad, plural, quote
from pytest_genguard.core.tolerances import Tolerances
from pytest_genguard.core.trace import GenerationTrace, PromptTrace
from pytest_genguard.core.verdict import Divergence, ErrorStats, Verdict, rerecord_command

__all__ = [
    "Comparison",
    "describe",
    "fix_command",
    "headline",
    "render",
    "statistics",
    "summary_line",
    "unseeded",
    "window",
]


@dataclass(frozen=True)
class Comparison:
    """The result of `compare()`: truthy when the behaviour holds; `str()` explains it (see `render`)."""

    verdict: Verdict
    tolerances: Tolerances
    divergences: tuple[Divergence, ...] = ()
    stale_reasons: tuple[str, ...] = ()
    environment_diff: tuple[tuple[str, JSONScalar, JSONScalar], ...] = ()
    stats: ErrorStats = field(default_factory=ErrorStats)
    expected: GenerationTrace = field(default_factory=lambda: GenerationTrace(prompts=()), repr=False)
    actual: GenerationTrace = field(default_factory=lambda: GenerationTrace(prompts=()), repr=False)
    prompt_verdicts: tuple[Verdict | None, ...] = ()
    dtype_change: tuple[str, str] | None = None
    """(recorded, new) dtype when the traces' dtypes differ (see `tolerances.dtype_change`)."""
    dtype_change_allowed: bool = False
    values_verdict: Verdict | None = None
    """What the values alone concluded, where a dtype switch the test did not allow turned it into a regression."""
    adapter_note: str | None = None
    """A PEFT adapter merged on one side only ("adapter 'sft' merged (the snapshot's was not): judged by values")."""

    def __bool__(self) -> bool:
        return self.verdict.ok

    @property
    def ok(self) -> bool:
        return self.verdict.ok

    @property
    def first(self) -> Divergence | None:
        """The first divergence overall (lowest prompt index), tolerated or not."""
        return self.divergences[0] if self.divergences else None

    @property
    def regressions(self) -> tuple[Divergence, ...]:
        return tuple(d for d in self.divergences if not d.tolerated)

    def differences(self) -> tuple[tuple[str, JSONScalar, JSONScalar], ...]:
        """The rows the explanation lists under "environment differs": `environment_diff` here; a subclass that
        knows more (verify()'s changed fingerprints) adds its own rows."""
        return self.environment_diff

    def render(self, fix: str | None = None) -> str:
        """The full explanation (see the module function `render`); subclasses add their own lines."""
        return render(self, fix=fix)

    def __str__(self) -> str:
        return self.render()


_MAX_TOPK_SHOWN = 5
_MAX_OTHERS = 5


def _prompt_label(div: Divergence) -> str:
    return f"prompt {div.prompt_index} {quote(div.prompt, 30)}"


def _token(text: str | None) -> str:
    return "(none)" if text is None else quote(text, 20)


# ---------------------------------------------------------------------------------------------------- summary


def headline(cmp: Comparison) -> Divergence | None:
    """The divergence the summary is about: the first regression, else the first (tolerated) divergence."""
    for div in cmp.divergences:
        if not div.tolerated:
            return div
    return cmp.first


def _top_k_size(trace: GenerationTrace, prompt: int, step: int) -> int:
    try:
        return len(trace.prompts[prompt].steps[step].top_ids)
    except IndexError:
        return 0


def _pair_at(cmp: Comparison, index: int) -> tuple[PromptTrace, PromptTrace] | None:
    """Both sides' prompt `index`, or None (a hand-made Comparison may not carry its traces)."""
    if index < len(cmp.expected.prompts) and index < len(cmp.actual.prompts):
        return cmp.expected.prompts[index], cmp.actual.prompts[index]
    return None


def describe(cmp: Comparison, div: Divergence) -> str:
    """One clause saying where and how a prompt diverged (no verdict prefix)."""
    where = _prompt_label(div)
    pair = _pair_at(cmp, div.prompt_index)
    if div.kind == "prompt" or (pair is None and div.kind in ("length", "finish_reason")):
        what = "is tokenized differently" if div.kind == "prompt" else f"differs in {div.kind} at step {div.step}"
        return f"{where} {what}: {div.detail}"
    if div.kind == "length" and pair is not None:
        e, a = pair
        return (
            f"{where} changes length at step {div.step}: expected {len(e.steps)} tokens (finish "
            f"{e.finish_reason!r}) but got {len(a.steps)} (finish {a.finish_reason!r})"
        )
    if div.kind == "finish_reason" and pair is not None:
        e, a = pair
        return (
            f"{where} finish reason changed after step {div.step}: expected {e.finish_reason!r} but got "
            f"{a.finish_reason!r} (same tokens)"
        )
    if div.kind in ("logprob", "topk"):
        what = "top-k drifts" if div.kind == "topk" else "drifts"
        token = f"token {_token(div.expected_token)}, id {div.expected_token_id}"
        return f"{where} {what} at step {div.step} ({token}): {div.detail}"
    # kind == "token"
    if div.expected_token_id == div.actual_token_id:
        return (
            f"{where} at step {div.step}: id {div.expected_token_id} now decodes to {_token(div.actual_token)} "
            f"instead of {_token(div.expected_token)} (the tokenizer's decoding changed)"
        )
    text = (
        f"{where} diverges at step {div.step}: expected {_token(div.expected_token)} (id {div.expected_token_id}, "
        f"logprob {number(div.expected_logprob)}) but got {_token(div.actual_token)} (id {div.actual_token_id}, "
        f"logprob {number(div.actual_logprob)})"
    )
    tie_tol = cmp.tolerances.tie_tol
    if div.tolerated:
        return f"{text}; near tie (gap {number(div.gap, 2)} <= tie_tol {tie_tol:g})"
    reasons = []
    if div.expected_rank_in_actual is None:
        k = _top_k_size(cmp.actual, div.prompt_index, div.step)
        reasons.append(f"{_token(div.expected_token)} is not in the new top-{k}")
    if div.actual_rank_in_expected is None:
        k = _top_k_size(cmp.expected, div.prompt_index, div.step)
        reasons.append(f"{_token(div.actual_token)} was not in the old top-{k}")
    if div.gap is not None:
        limit = f"tie_tol {tie_tol:g}" if tie_tol > 0 else "tie_tol 0: no divergence tolerated"
        reasons.append(f"not a near tie (gap {number(div.gap, 2)} > {limit})")
    if div.expected_margin is not None and math.isfinite(div.expected_margin):
        reasons.append(f"margin was {number(div.expected_margin, 3)}")
    return "; ".join([text, *reasons])


def fix_command(cmp: Comparison, fix: str | None = None) -> str | None:
    """What to run if the change is intended (None when nothing needs fixing): `fix`, else the plain command."""
    if not cmp.verdict.ok:
        return fix or rerecord_command(cmp.verdict)
    return None


ALLOW_DTYPE_CHANGE = (
    "if the switch is intended, mark the test @pytest.mark.genguard(allow_dtype_change=True), or keep a baseline per "
    "dtype: pytest --genguard-baselines per-env --snapshot-update"
)


def unseeded(trace: GenerationTrace) -> bool:
    """Whether `trace` was sampled without a seed: no run draws its tokens again (record() refuses to make one;
    older versions did not)."""
    settings = trace.settings
    sampled = settings.get("do_sample") is True or settings.get("mode") == "sample"
    return sampled and settings.get("seed") is None


def summary_line(cmp: Comparison, *, fix: str | None = None) -> str:
    """The verdict and the first divergence in one sentence: the line pytest always shows. A dtype switch comes
    right after the verdict: it decides how every value was judged, and it fails unless the test allows it; a
    failing snapshot that was sampled without a seed says so first: nothing else about it can be trusted."""
    line = _verdict_line(cmp, cmp.verdict, fix)
    if cmp.adapter_note is not None and cmp.verdict is not Verdict.STALE:
        line = f"{line}; {cmp.adapter_note}"
    if not cmp.verdict.ok and unseeded(cmp.expected):
        line = (
            f"{cmp.verdict}: the recorded trace was sampled without a seed (do_sample=True, seed None): no run can "
            "draw its tokens again, so it cannot be checked; record it with a seed (record(..., seed=0)) and "
            f"re-record: {fix_command(cmp, fix)}; {line}"
        )
    if cmp.dtype_change is None:
        return line
    old, new = cmp.dtype_change
    head = f"dtype changed {_bare(old)} -> {_bare(new)}, judged under the looser dtype's tolerances ({cmp.tolerances})"
    if cmp.dtype_change_allowed:
        return f"{cmp.verdict}: {head}, allowed by the test; {line}"
    if cmp.values_verdict is not None:
        held = _verdict_line(cmp, cmp.values_verdict, fix)
        return f"{cmp.verdict}: {head}; the values hold ({held}) but the test does not allow a dtype switch; " + (
            ALLOW_DTYPE_CHANGE
        )
    return f"{cmp.verdict}: {head}; {line}"


def _verdict_line(cmp: Comparison, verdict: Verdict, fix: str | None) -> str:
    if verdict is Verdict.STALE:
        return f"stale: {'; '.join(cmp.stale_reasons)}; if intended, re-record with: {fix_command(cmp, fix)}"
    if verdict is Verdict.IDENTICAL:
        steps = _steps_compared(cmp)
        return f"identical ({plural(len(cmp.expected.prompts), 'prompt')}, {plural(steps, 'step')}, bitwise)"
    if verdict is Verdict.WITHIN_TOLERANCE:
        st = cmp.stats
        if st.worst is None:
            return f"within tolerance (values equal, top-k order differs; {cmp.tolerances})"
        return f"within tolerance (max |diff| {number(st.max_abs, 2)} at {st.worst}; {cmp.tolerances})"
    div = headline(cmp)
    if div is None:  # not reachable for a Comparison made by compare()
        return str(verdict)
    text = f"{verdict}: {describe(cmp, div)}"
    others = len(cmp.regressions) - (0 if div.tolerated else 1)
    if verdict is Verdict.REGRESSION and others > 0:
        text += f" (+{plural(others, 'more prompt')} regressed)"
    return text


def _steps_compared(cmp: Comparison) -> int:
    return sum(min(len(e.steps), len(a.steps)) for e, a in zip(cmp.expected.prompts, cmp.actual.prompts, strict=False))


# ---------------------------------------------------------------------------------------------------- sections


def _vocabulary(*traces: GenerationTrace) -> dict[int, str]:
    """Token texts known from the traces: their chosen tokens and the alternatives' `token_texts`."""
    vocab: dict[int, str] = {}
    for trace in traces:
        for p in trace.prompts:
            for s in p.steps:
                vocab.setdefault(s.token_id, s.token)
        for tid, text in trace.token_texts.items():
            vocab.setdefault(tid, text)
    return vocab


def _topk_text(ids: tuple[int, ...], logprobs: tuple[float, ...], vocab: dict[int, str]) -> str:
    entries = []
    for tid, lp in list(zip(ids, logprobs, strict=False))[:_MAX_TOPK_SHOWN]:
        label = quote(vocab[tid], 10) if tid in vocab else f"#{tid}"
        entries.append(f"{label}:{number(lp)}")
    if len(ids) > _MAX_TOPK_SHOWN:
        entries.append(f"+{len(ids) - _MAX_TOPK_SHOWN} more")
    return " ".join(entries)


def _row(mark: str, step: str, side: str, p: PromptTrace, s: int, vocab: dict[int, str]) -> str:
    if s < len(p.steps):
        st = p.steps[s]
        token, margin, topk = quote(st.token, 14), number(st.margin, 3), _topk_text(st.top_ids, st.top_logprobs, vocab)
    else:
        token, margin, topk = f"(end: {p.finish_reason})", "", ""
    return f"{mark:<2} {step:>5}  {side:<8}  {pad(token, 18)}  {margin:>7}  {topk}".rstrip()


def window(
    cmp: Comparison,
    div: Divergence,
    radius: int = 2,
    *,
    names: tuple[str, str] = ("expected", "actual"),
    show: tuple[bool, bool] = (True, True),
) -> list[str]:
    """Steps `div.step` ± `radius` of the divergent prompt, expected above actual, divergent step marked ``>>``
    (`names` label the sides, `show` picks them: `genguard review` shows "old" and "new", or one alone)."""
    pair = _pair_at(cmp, div.prompt_index)
    if pair is None:
        return [f"prompt {div.prompt_index}: traces not available ({div.detail})"]
    e, a = pair
    last = max(len(e.steps), len(a.steps))
    if last == 0:
        return [f"prompt {div.prompt_index}: no generated steps on either side"]
    vocab = _vocabulary(cmp.expected, cmp.actual)
    lines = [f"prompt {div.prompt_index} {quote(div.prompt, 60)}, steps around the divergence:"]
    if e.messages is not None:  # the conversation, not its rendered text cut short
        lines[0] = f"prompt {div.prompt_index} (a conversation), steps around the divergence:"
        lines[1:1] = [f"   {line}" for line in e.conversation_lines()]
    lines.append(f"{'':<2} {'step':>5}  {'side':<8}  {pad('token', 18)}  {'margin':>7}  top-k (token:logprob)")
    for s in range(max(div.step - radius, 0), min(div.step + radius + 1, last)):
        mark = ">>" if s == div.step else ""
        sides = [(name, p) for name, p, wanted in zip(names, (e, a), show, strict=True) if wanted]
        for n, (name, p) in enumerate(sides):
            lines.append(_row(mark, "" if n else str(s), name, p, s, vocab))
    if div.kind == "token" and div.expected_token_id != div.actual_token_id and div.step + 1 < last:
        lines.append(f"(the paths split at step {div.step}: later steps are shown, not compared)")
    return lines


def statistics(cmp: Comparison) -> list[str]:
    """The error statistics section."""
    st = cmp.stats
    lines = [
        "statistics (steps up to each prompt's first divergence):",
        f"  compared {st.compared} values, {st.exceeded} beyond tolerance ({100 * st.exceeded_share:.2f}%)",
        f"  max abs err {number(st.max_abs, 3)}, mean abs err {number(st.mean_abs, 3)}, "
        f"max rel err {number(st.max_rel, 3)}" + (f", worst at {st.worst}" if st.worst else ""),
        f"  tolerances: {cmp.tolerances}",
    ]
    skipped = [str(i) for i, v in enumerate(cmp.prompt_verdicts) if v is None]
    if skipped:
        lines.append(f"  not compared (prompt missing or changed): prompt {', '.join(skipped)}")
    return lines


def _environment(cmp: Comparison) -> list[str]:
    rows = cmp.differences()
    if not rows:
        return []
    lines = ["environment differs (expected -> actual):"]
    for name, old, new in rows:
        lines.append(f"  {name}: {_scalar(old)} -> {_scalar(new)}")
    return lines


def _scalar(value: object) -> str:
    return quote(value, 50) if isinstance(value, str) else repr(value)


def _others(cmp: Comparison, shown: Divergence | None) -> list[str]:
    others = [d for d in cmp.divergences if d is not shown]
    if not others:
        return []
    lines = ["other prompts:"]
    for div in others[:_MAX_OTHERS]:
        lines.append(f"  {div.verdict} ({div.kind}): {describe(cmp, div)}")
    if len(others) > _MAX_OTHERS:
        lines.append(f"  ... and {len(others) - _MAX_OTHERS} more")
    return lines


# The environment fields that change what a kernel computes, in the order a reader checks them: the library
# releases first (a torch upgrade is as much the user's own doing as a transformers one, and names the build, e.g.
# 2.6.0+cu124), then the hardware and the settings.
_HEADLINE_FIELDS = (
    ("engine", ""),  # a serving engine's trace (pytest_genguard.engines) against the transformers one
    ("torch", "torch "),
    ("transformers", "transformers "),
    ("trl", "trl "),  # a recorder history's training libraries (`environments.LIBRARY_FIELDS`)
    ("peft", "peft "),
    ("device_type", ""),
    ("gpu_name", ""),
    ("cpu_capability", ""),
    ("dtype", ""),
    ("attn_implementation", "attention "),
    ("num_threads", "threads "),
)


def environment_line(cmp: Comparison) -> str | None:
    """``recorded on torch 2.13.0+cpu / AVX2, now torch 2.6.0+cu124 / AVX512``: the environment fields that differ,
    library releases first, before any number (None when none of them does), so a reader knows at once what moved."""
    if not cmp.expected.environment or not cmp.actual.environment:
        return None
    moved = {key: (old, new) for key, old, new in cmp.environment_diff if old is not None or new is not None}
    before, after = [], []
    for key, label in _HEADLINE_FIELDS:
        if key not in moved or (key == "attn_implementation" and "engine" in moved):
            continue  # an engine has no transformers attention implementation: its name says it all
        old, new = moved[key]
        if key != "engine" and "engine" in moved and (old is None or new is None):
            continue  # a server's trace has no torch or transformers of its own: the engine's name says what ran
        if key == "engine":  # the side without an engine is transformers itself
            old, new = old or "transformers", new or "transformers"
        before.append(f"{label}{_bare(old)}")
        after.append(f"{label}{_bare(new)}")
    if not before:
        return None
    return f"recorded on {' / '.join(before)}, now {' / '.join(after)}"


def _bare(value: object) -> str:
    """A value unquoted, with what a terminal would not show escaped; '?' for an unknown one."""
    return "?" if value is None else "".join(escape_char(c) for c in str(value))


def render(cmp: Comparison, *, fix: str | None = None) -> str:
    """The full explanation of `cmp` (summary line first, then what differs in the environment); `fix` replaces
    the suggested command."""
    lines = [summary_line(cmp, fix=fix)]
    moved = environment_line(cmp) if cmp.verdict is not Verdict.IDENTICAL else None
    if moved is not None:
        lines.append(moved)
    div = headline(cmp)
    if div is not None:
        if cmp.verdict is Verdict.STALE:
            lines.append(f"meanwhile ({div.verdict}): {describe(cmp, div)}")
        lines.append("")
        if div.kind == "prompt":
            lines.append(f"prompt {div.prompt_index} {quote(div.prompt, 60)}: {div.detail}")
        else:
            lines += window(cmp, div)
    if cmp.verdict is not Verdict.IDENTICAL:
        lines += ["", *statistics(cmp)]
    extra = _others(cmp, div) + _environment(cmp)
    if extra:
        lines += ["", *extra]
    command = fix_command(cmp, fix)
    if command is not None:
        if cmp.verdict is Verdict.STALE:
            lines += ["", f"fix: if the model/tokenizer/settings/prompts changed on purpose, re-record: {command}"]
        else:
            lines += ["", f"fix: if the new behaviour is intended: {command}"]
    return "\n".join(lines)
