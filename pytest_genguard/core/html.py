"""HTML for traces and comparisons: self-contained pages (inline CSS and JS, no network, no fonts) that show what
changed.

For every failed genguard check it draws the expected and the actual token paths side by side, with the first
divergence highlighted (class ``genguard-divergence``; the first one in the page also has that id), the top-k
alternatives of every step as probability bars with their logprobs written beside them, the environment fields that
differ, the verdict and the command that re-records. Logprob drift is the most common failure and a sharp model
draws every alternative's bar at "0%": so each value that differs from the other side's value for the same token is
marked (class ``d`` within tolerance, ``x`` beyond it, with the other value and the difference in its title), and an
alternative the other side's top-k lacks is marked ``n``. A run where everything held gets a short "all N checks
held" page; a snapshot judged by a fidelity budget gets each step's KLD to the reference instead of the sides. Every
string is escaped; tokens that are not valid UTF-8 on their own (stored as lone surrogates) are
shown as ``\\xNN``; alternatives are named from the traces' ``token_texts`` (ids show as ``#id`` only in traces that
do not carry it).
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pytest_genguard.core.change import Kld, path_split
from pytest_genguard.core.comparison import Comparison
from pytest_genguard.core.fidelity import trace_fidelity
from pytest_genguard.core.jsontext import JSONScalar
from pytest_genguard.core.rule import Rule, StepRule, ValueKind
from pytest_genguard.core.svg import KEY, SVG_CSS, kld_chart, prompt_chart
from pytest_genguard.core.text import clean, display_token, quote
from pytest_genguard.core.tolerances import dtype_default, same
from pytest_genguard.core.trace import GenerationTrace, PromptTrace, Step

__all__ = ["DIVERGENCE", "Page", "TraceFile", "badge", "document", "escape", "render_trace_files", "toolbar"]

DIVERGENCE = "genguard-divergence"

_CSS = (
    """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{background:#1d2330;color:#fff;padding:14px 24px}header h1{margin:0;font-size:20px}
header p{margin:4px 0 0;color:#c5cad3}main{padding:16px 24px}
section.f{background:#fff;border:1px solid #d8dce3;border-radius:6px;margin:0 0 18px;padding:12px 16px}
h2{font-size:16px;margin:0 0 6px;word-break:break-all}h3{font-size:14px;margin:12px 0 4px}
.v{display:inline-block;border-radius:10px;padding:1px 9px;font-size:12px;font-weight:600;color:#fff;background:#666}
.v-regression,.v-failed,.v-missing{background:#c62828}.v-stale{background:#b26a00}.v-tolerated-divergence{background:#6a5acd}
.v-identical,.v-within-tolerance,.v-held,.v-created,.v-updated{background:#2e7d32}
.sum{font-weight:600;margin:6px 0}pre{background:#f1f3f6;padding:8px;overflow:auto;font-size:12px}
table{border-collapse:collapse;margin:4px 0 8px}td,th{border:1px solid #e1e4ea;padding:2px 6px;vertical-align:top}
th{background:#eef0f4;text-align:left;font-size:12px}td.n{text-align:right;color:#667;font-size:12px}
.tok{font-family:ui-monospace,Menlo,Consolas,monospace;white-space:pre;background:#eef2ff;border-radius:3px;
padding:0 3px}
ol.k{list-style:none;margin:0;padding:0;min-width:260px}ol.k li{position:relative;font-size:11px;height:15px;
font-family:ui-monospace,Menlo,Consolas,monospace;white-space:pre;overflow:hidden}
ol.k i{position:absolute;left:0;top:1px;bottom:1px;background:#c9d7f5;z-index:0}ol.k li.c i{background:#8fb0ee}
ol.k li.o i{background:#f2a7a7}ol.k li.o span{color:#c62828;font-weight:700}ol.k li.c span{font-weight:600}
ol.k span{position:relative;z-index:1}ol.k em{position:relative;z-index:1;
float:right;font-style:normal;color:#445;padding-left:6px}
ol.k li.d em,.lp.d{background:#ffe9a8;color:#6b4b00}ol.k li.x em,.lp.x{background:#c62828;color:#fff;font-weight:700}
ol.k li.n{outline:1px dashed #b26a00;outline-offset:-1px}.lp{font:11px ui-monospace,Menlo,Consolas,monospace;
color:#445;margin-left:6px;padding:0 2px}ol.k b{position:relative;z-index:1;font-weight:400;margin-left:4px}
.fix code{background:#1d2330;color:#fff;padding:2px 6px;border-radius:3px;user-select:all}.key{font-size:12px}
tr.genguard-divergence td{background:#fff1f0;border-top:2px solid #c62828;border-bottom:2px solid #c62828}
tr.genguard-divergence.tol td{background:#f3f0ff;border-color:#6a5acd}tr.after td{opacity:.45}
body.hide-after tr.after,body.compact tr.early{display:none}tr.fold{display:none}
body.compact tr.fold{display:table-row}tr.fold td{color:#667;font-style:italic;background:#f6f7f9}
tr.fragile td.m{color:#c62828;font-weight:600}
.bar{margin:8px 0}.bar button{margin-right:8px}.muted{color:#667}
ul.change{margin:4px 0 8px;padding-left:20px}
"""
    + SVG_CSS
)

_JS = """
window.addEventListener("error",function(e){document.body.setAttribute("data-genguard-error",String(e.message));});
(function(){
  var d=document,divs=d.querySelectorAll(".genguard-divergence");
  var jump=d.getElementById("jump"),hide=d.getElementById("hide");
  if(jump){jump.disabled=!divs.length;jump.addEventListener("click",function(){
    var t=d.getElementById("genguard-divergence");if(t){t.scrollIntoView({block:"center"});}});}
  if(hide){hide.addEventListener("click",function(){d.body.classList.toggle("hide-after");});}
  var all=d.getElementById("all");d.body.classList.add("compact");
  if(all){all.addEventListener("click",function(){d.body.classList.toggle("compact");});}
  d.body.setAttribute("data-genguard-ready",String(divs.length));
})();
"""

_CONTEXT = 3
"""Steps shown before a divergence; earlier ones fold away (the script folds them, so without it all show)."""


def escape(value: object) -> str:
    return html.escape(clean(str(value)), quote=True)


def _tok(token: str | None) -> str:
    return (
        '<span class="muted">(none)</span>'
        if token is None
        else f'<span class="tok">{escape(display_token(token))}</span>'
    )


def _cell(
    step: Step | None, prompt: PromptTrace | None, other: Step | None = None, rule: StepRule | None = None
) -> str:
    """The chosen token and its logprob (marked where the other side chose the same token at another logprob), or
    where that side's path ended."""
    if step is not None:
        same_token = other if other is not None and other.token_id == step.token_id else None
        return _tok(step.token) + _logprob_mark(
            step.logprob, None if same_token is None else same_token.logprob, rule, "span"
        )
    return '<span class="muted">(ended: ' + (escape(prompt.finish_reason) if prompt else "no prompt") + ")</span>"


def _difference(
    value: float,
    other: float | None,
    rule: StepRule | None,
    kind: ValueKind = "logprob",
    shift: tuple[float, float] = (0.0, 0.0),
) -> str:
    """ "" when `other` is absent or equal, "d" when it differs within the allowance compare() held it to at this
    step (`rule`), "x" beyond it. `shift`: what each side's value is judged relative to (a top-k logprob as a gap to
    the chosen token's, where the rule says so)."""
    if other is None or same(value, other):
        return ""
    a, b = value - shift[0], other - shift[1]
    within = rule is not None and math.isfinite(a) and math.isfinite(b) and abs(a - b) <= rule.allowance(a, b, kind)
    return "d" if within else "x"


def _logprob_mark(value: float, other: float | None, rule: StepRule | None, tag: str) -> str:
    """`value` as a number (class ``lp``), marked and explained in its title when it differs from `other`."""
    kind = _difference(value, other, rule)
    title = f"logprob {_num(value, 9)}"
    if kind and other is not None:
        delta = value - other if math.isfinite(value) and math.isfinite(other) else math.nan
        verdict = "within tolerance" if kind == "d" else "beyond tolerance"
        title += f"; other side {_num(other, 9)}; difference {_signed(delta)} ({verdict})"
    cls = f"lp {kind}".strip()
    return f'<{tag} class="{cls}" title="{escape(title)}">{escape(_num(value, 6))}</{tag}>'


def _signed(value: float) -> str:
    return f"{value:+.2g}" if math.isfinite(value) else str(value)


def _num(value: float | None, digits: int = 4) -> str:
    if value is None:
        return ""
    return f"{value:.{digits}g}" if math.isfinite(value) else str(value)


def _prob(logprob: float) -> float:
    """exp(logprob) as a percentage in [0, 100] (NaN and -inf draw as 0)."""
    if math.isnan(logprob):
        return 0.0
    return max(0.0, min(100.0, math.exp(min(logprob, 0.0)) * 100.0))


def badge(verdict: str) -> str:
    slug = re.sub(r"[^a-z]+", "-", verdict.lower()).strip("-") or "unknown"
    return f'<span class="v v-{slug}">{escape(verdict)}</span>'


def _topk(
    step: Step | None,
    other: Step | None,
    texts: Mapping[int, str],
    *,
    split: bool = False,
    rule: StepRule | None = None,
) -> str:
    """The step's top-k as bars of exp(logprob) with the logprob written beside each: the chosen token darker, the
    other side's token (at a split) in red; with the other side's step, values that differ from its value for the
    same token are marked (``d``/``x``) and alternatives it lacks are marked ``n``."""
    if step is None:
        return ""
    theirs = dict(zip(other.top_ids, other.top_logprobs, strict=False)) if other is not None else {}
    shift = (step.logprob, other.logprob) if rule is not None and rule.gaps and other is not None else (0.0, 0.0)
    items = []
    for tid, lp in zip(step.top_ids, step.top_logprobs, strict=False):
        classes = ["c"] if tid == step.token_id else []
        if split and other is not None and tid == other.token_id and tid != step.token_id:
            classes = ["o"]
        kind = _difference(lp, theirs.get(tid), rule, "top", shift)
        if kind:
            classes.append(kind)
        title = f"id {tid} logprob {_num(lp, 9)} ({_prob(lp):.3g}%)"
        delta = ""
        if kind:
            title += f"; other side {_num(theirs[tid], 9)}; difference {_signed(lp - theirs[tid])}"
            delta = f"<b>{escape(_signed(lp - theirs[tid]))}</b>"
        elif other is not None and tid not in theirs:
            classes.append("n")
            title += "; not in the other side's top-k"
        text = texts.get(tid, f"#{tid}")
        cls = f' class="{" ".join(classes)}"' if classes else ""
        items.append(
            f'<li{cls} title="{escape(title)}"><i style="width:{_prob(lp):.1f}%"></i>'
            f"<span>{escape(display_token(text))}</span><em>{escape(_num(lp, 6))}{delta}</em></li>"
        )
    return '<ol class="k">' + "".join(items) + "</ol>"


def _texts(*traces: GenerationTrace) -> dict[int, str]:
    """Token texts for ids: the traces' stored alternatives (`token_texts`) and their chosen tokens."""
    out: dict[int, str] = {}
    for trace in traces:
        out.update(trace.token_texts)
        for p in trace.prompts:
            for s in p.steps:
                out.setdefault(s.token_id, s.token)
    return out


@dataclass
class Page:
    """Builds one page; remembers whether the page-wide divergence id was handed out."""

    first_divergence_done: bool = False
    key_done: bool = False

    def divergence_attrs(self, tolerated: bool) -> str:
        cls = DIVERGENCE + (" tol" if tolerated else "")
        if self.first_divergence_done:
            return f'class="{cls}"'
        self.first_divergence_done = True
        return f'id="{DIVERGENCE}" class="{cls}"'

    def side_by_side(self, comparison: Comparison, index: int) -> str:
        """One prompt's expected and actual paths as rows, the split row highlighted, later rows dimmed."""
        e_p = comparison.expected.prompts[index] if index < len(comparison.expected.prompts) else None
        a_p = comparison.actual.prompts[index] if index < len(comparison.actual.prompts) else None
        div = next((d for d in comparison.divergences if d.prompt_index == index), None)
        texts = _texts(comparison.expected, comparison.actual)
        rule = Rule.between(comparison.expected, comparison.actual, comparison.tolerances)
        e_steps = e_p.steps if e_p else ()
        a_steps = a_p.steps if a_p else ()
        rows = []
        for s in range(max(len(e_steps), len(a_steps))):
            es = e_steps[s] if s < len(e_steps) else None
            as_ = a_steps[s] if s < len(a_steps) else None
            attrs = ""
            if div is not None and s == div.step:
                attrs = " " + self.divergence_attrs(div.tolerated)
            elif div is not None and s > div.step:
                attrs = ' class="after"'
            elif div is not None and s < div.step - _CONTEXT:
                attrs = ' class="early"'
            split = div is not None and s == div.step
            # Values after a divergence are not compared (the paths differ), so they are not marked either.
            e_other, a_other = (as_, es) if div is None or s <= div.step else (None, None)
            at = rule.at(es, as_) if es is not None and as_ is not None else None  # what compare() held them to
            rows.append(
                f"<tr{attrs}><td class=n>{s}</td><td>{_cell(es, e_p, e_other, at)}</td>"
                f"<td>{_topk(es, e_other, texts, split=split, rule=at)}</td><td>{_cell(as_, a_p, a_other, at)}</td>"
                f"<td>{_topk(as_, a_other, texts, split=split, rule=at)}</td></tr>"
            )
        if div is not None and div.step > _CONTEXT:
            hidden = div.step - _CONTEXT
            rows.insert(
                hidden,
                f'<tr class="fold"><td colspan=5>steps 0 to {hidden - 1} agree (shown with "show all steps")</td></tr>',
            )
        either = e_p if e_p is not None else a_p
        prompt = either.prompt if either is not None else ""
        status = "identical path" if div is None else f"step {div.step}: {div.kind} ({div.detail})"
        verdict = comparison.prompt_verdicts[index] if index < len(comparison.prompt_verdicts) else None
        head = (
            f"<h3>prompt {index}: {escape(quote(prompt, 80))} {badge(str(verdict) if verdict else 'not compared')} "
            f'<span class="muted">{escape(status)}</span></h3>'
        )
        if either is not None:  # a conversation: its messages, not the rendered text cut short
            head += "".join(f"<div class=muted>{escape(line)}</div>" for line in either.conversation_lines())
        chart = prompt_chart(
            e_p,
            a_p,
            split=None if div is None else div.step,
            tolerated=div is not None and div.tolerated,
            tie_tol=comparison.tolerances.tie_tol,
            path_split=path_split(e_p, a_p),
        )
        table = chart + (
            "<table><tr><th>step</th><th>expected</th><th>expected top-k</th><th>actual</th><th>actual top-k</th>"
            "</tr>" + "".join(rows) + "</table>"
        )
        if div is None:
            return f"<details><summary>{head}</summary>{table}</details>"
        return head + table

    def comparison(self, comparison: Comparison) -> str:
        parts = []
        if comparison.stale_reasons:
            parts.append("<h3>why stale</h3><ul>" + "".join(f"<li>{escape(r)}</li>" for r in comparison.stale_reasons))
            parts.append("</ul>")
        if comparison.differences():
            rows = "".join(
                f"<tr><td>{escape(k)}</td><td>{escape(_scalar(a))}</td><td>{escape(_scalar(b))}</td></tr>"
                for k, a, b in comparison.differences()
            )
            parts.append(
                "<h3>environment fields that differ</h3><table><tr><th>field</th><th>expected</th><th>actual</th>"
                f"</tr>{rows}</table>"
            )
        st = comparison.stats
        parts.append(
            f'<p class="muted">tolerances: {escape(comparison.tolerances)}; values compared {st.compared}, beyond '
            f"tolerance {st.exceeded}, max |diff| {_num(st.max_abs)}"
            + (f" at {escape(st.worst)}" if st.worst else "")
            + "</p>"
        )
        parts.append(
            '<p class="muted key">numbers are raw logprobs; <span class="lp d">amber</span>: differs from the other '
            'side within tolerance, <span class="lp x">red</span>: beyond it (hover for both values); dashed: not in '
            "the other side's top-k</p>"
        )
        if not self.key_done:  # once a page: every picture is drawn alike
            parts.append(f'<p class="muted key">{escape(KEY)}</p>')
            self.key_done = True
        n = max(len(comparison.expected.prompts), len(comparison.actual.prompts))
        parts.extend(self.side_by_side(comparison, i) for i in range(n))
        return "".join(parts)

    def fidelity(self, reference: GenerationTrace, candidate: GenerationTrace, kld: Kld | None = None) -> str:
        """A fidelity judgement (``@pytest.mark.genguard(fidelity=...)``): per prompt, each step's KLD to the reference
        drawn against the budget's KLD limits (`kld`: the judgement's own figures, exact with the model in process;
        else the lower bound from the two traces), then each step's KLD, Δp and whether the top-1 agrees."""
        steps, _, _ = trace_fidelity(reference, candidate)
        texts = _texts(reference, candidate)
        parts = ['<p class="muted key">KLD ≥: KL(reference ‖ candidate), a lower bound from the recorded top-k</p>']
        for i, p in enumerate(reference.prompts):
            rows = [
                f"<tr{'' if s.same_top1 else ' class=x'}><td class=n>{s.step}</td><td>{_tok(texts.get(s.token_id))}"
                f"</td><td class=n>{_num(s.kld, 3)}</td><td class=n>{_num(s.delta_p, 3)}</td>"
                f"<td>{'yes' if s.same_top1 else 'no'}</td></tr>"
                for s in steps
                if s.prompt == i
            ]
            drawn = (
                kld
                if kld is not None and kld.per_step
                else Kld(0, 0, 0, False, tuple((s.prompt, s.step, s.kld) for s in steps))
            )
            parts.append(
                f"<h3>prompt {i}: {escape(quote(p.prompt, 80))}</h3>{self.kld_chart(drawn, i, kld)}"
                "<table><tr><th>step</th><th>reference token</th>"
                "<th>KLD ≥</th><th>Δp</th><th>same top-1</th></tr>" + "".join(rows) + "</table>"
            )
        return "".join(parts)

    def kld_chart(self, drawn: Kld, prompt: int, judged: Kld | None = None) -> str:
        """Prompt `prompt`'s KLD per step from `drawn`, against the limits of the judgement (`judged`)."""
        per_step = [(s, k) for p, s, k in drawn.per_step if p == prompt]
        limits = (judged or drawn).limits
        return kld_chart(per_step, limits, exact=drawn.exact) if per_step else ""

    def kld_only(self, kld: Kld) -> str:
        """A fidelity judgement of a model in process (no candidate trace): each prompt's KLD per step."""
        prompts = sorted({p for p, _, _ in kld.per_step})
        return "".join(f"<h3>prompt {p}</h3>{self.kld_chart(kld, p)}" for p in prompts)

    def trace(self, trace: GenerationTrace) -> str:
        """One trace on its own (for `genguard report DIR`): metadata, then every prompt's path with its top-k."""
        tol = dtype_default(trace.dtype)
        meta = [("model", trace.model.short() + f" ({trace.model.dtype})" if trace.model else "(none)")]
        if trace.tokenizer:
            meta.append(("tokenizer", f"{trace.tokenizer.name} {trace.tokenizer.hash[:12]}"))
        meta += [(f"settings.{k}", _scalar(v)) for k, v in sorted(trace.settings.items()) if v is not None]
        unset = sorted(f"settings.{k}" for k, v in trace.settings.items() if v is None)
        meta += [(f"environment.{k}", _scalar(v)) for k, v in sorted(trace.environment.items())]
        parts = [
            "<table>" + "".join(f"<tr><td>{escape(k)}</td><td>{escape(v)}</td></tr>" for k, v in meta) + "</table>"
        ]
        if unset:  # what is not set folds away: the settings that are make the trace
            parts.append(
                f"<details><summary>{len(unset)} settings unset</summary><p class=muted>"
                f"{escape(', '.join(unset))}</p></details>"
            )
        texts = _texts(trace)
        for i, p in enumerate(trace.prompts):
            rows = []
            for s, step in enumerate(p.steps):
                fragile = tol.near_tie(step.margin)
                rows.append(
                    f"<tr{' class=fragile' if fragile else ''}><td class=n>{s}</td><td>{_tok(step.token)}</td>"
                    f"<td class=n>{_num(step.logprob)}</td><td class='n m'>{_num(step.margin)}</td>"
                    f"<td>{_topk(step, None, texts)}</td></tr>"
                )
            parts.append(
                f"<h3>prompt {i}: {escape(quote(p.prompt, 80))} <span class=muted>{len(p.steps)} steps, finish "
                f"{escape(p.finish_reason)}, smallest margin {_num(p.min_margin)}</span></h3>"
                + "".join(f"<div class=muted>{escape(line)}</div>" for line in p.conversation_lines())
                + "<table><tr><th>step</th>"
                "<th>token</th><th>logprob</th><th>margin</th><th>top-k</th></tr>" + "".join(rows) + "</table>"
            )
        return "".join(parts)


def _scalar(value: JSONScalar) -> str:
    return "(unset)" if value is None else str(value)


def document(title: str, subtitle: str, body: str) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body><header><h1>{escape(title)}</h1>"
        f"<p>{subtitle}</p></header><main>{body}</main><script>{_JS}</script></body></html>\n"
    )


def toolbar() -> str:
    return (
        '<div class="bar"><button id="jump" type="button">jump to the first divergence</button>'
        '<button id="hide" type="button">hide steps after each divergence</button>'
        '<button id="all" type="button">show all steps</button></div>'
    )


@dataclass(frozen=True)
class TraceFile:
    """A file found under a snapshots folder: its display path, and its traces or why it could not be read.

    `traces` holds (label, trace) pairs: one unlabelled trace for a trace file, one per checkpoint for a recorder
    history ("checkpoint 2: step 150, loss 0.41").
    """

    path: str
    traces: tuple[tuple[str, GenerationTrace], ...] = ()
    error: str | None = None


def render_trace_files(files: Sequence[TraceFile], *, root: str) -> str:
    """The page for `genguard report DIR`: every trace file rendered under its path, unreadable files named."""
    page = Page()
    good = sum(1 for f in files if f.error is None)
    unreadable = f", {len(files) - good} unreadable" if good < len(files) else ""
    parts = [f"<p>{good} trace files under {escape(root)}{unreadable}"]
    parts.append("</p><ul>" + "".join(f'<li><a href="#f{i}">{escape(f.path)}</a></li>' for i, f in enumerate(files)))
    parts.append("</ul>")
    for i, f in enumerate(files):
        if f.error is not None:
            inner = f"<p>{badge('failed')} {escape(f.error)}</p>"
        else:
            inner = "".join((f"<h3>{escape(label)}</h3>" if label else "") + page.trace(t) for label, t in f.traces)
        parts.append(f'<section class="f" id="f{i}"><h2>{escape(f.path)}</h2>{inner}</section>')
    return document("genguard traces", escape(root), "".join(parts))
