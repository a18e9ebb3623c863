"""Pictures for the HTML report, as inline SVG (no script, no font, no network): what a reviewer looks at first.

- `prompt_chart`: one prompt of a comparison, both sides over the steps: the chosen token's probability (upper
  panel) and the top-1/top-2 margin (lower panel, log scale, with the tie tolerance under which a split is a near
  tie), the first divergence marked (red, or purple when tolerated) and the steps after it shaded (the paths differ
  there: their values are not compared).
- `kld_chart`: a fidelity judgement's KLD per step (log scale) against the budget's KLD limits, steps above a limit
  in red.

The pictures are inline in the report's HTML (so without an xmlns) and styled by its stylesheet (`SVG_CSS`, which
`core.html` includes): about 2 KB each, whole-unit coordinates, one path for a panel's grid. Every text is escaped;
the points at the split carry a ``<title>`` (step, token, values) for hovering; the table under each picture has
every step's; the page says once which line is which (`KEY`). Standard library only.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence

from pytest_genguard.core.text import clean, display_token
from pytest_genguard.core.trace import PromptTrace

__all__ = ["KEY", "SVG_CSS", "kld_chart", "prompt_chart"]

KEY = (
    "pictures: the expected side solid blue, the actual dashed orange; above, the chosen token's probability; below, "
    "the top-1/top-2 margin (log scale) and the tie tolerance; the red line marks the first divergence (purple: a near "
    "tie), the steps after it are shaded (their values are not compared); a dashed dark line: where the tokens split, "
    "when a value drifted first"
)
"""What the pictures show, said once per page."""

SVG_CSS = (
    "svg.chart{display:block;max-width:100%;height:auto;margin:6px 0 10px;background:#fff}"
    "svg.chart text{font:10px system-ui,sans-serif;fill:#445}svg.chart .ctk{text-anchor:end}"
    "svg.chart .cmd{text-anchor:middle}svg.chart .cfr{fill:none;stroke:#c5cad3}svg.chart .cgr{fill:none;stroke:#e1e4ea}"
    "svg.chart polyline{fill:none;stroke-width:1.6;vector-effect:non-scaling-stroke}"
    "svg.chart .cexp polyline{stroke:#2f5fb3}svg.chart .cnew polyline{stroke:#d9480f;"
    "stroke-dasharray:5 3}svg.chart circle.cexp{fill:#2f5fb3}svg.chart circle.cnew{fill:#d9480f}"
    "svg.chart .csp{stroke:#c62828;stroke-width:2}svg.chart text.csp{fill:#c62828;stroke:none}"
    "svg.chart .ctie{stroke:#6a5acd;stroke-width:2}svg.chart text.ctie{fill:#6a5acd;stroke:none}"
    "svg.chart .ctol{stroke:#6a5acd;stroke-dasharray:2 3}svg.chart .clim{stroke:#c62828;stroke-dasharray:4 3}"
    "svg.chart .cover{fill:#c62828}svg.chart .csh{fill:#f1f3f6}svg.chart path.cpath{stroke:#1d2330;"
    "stroke-dasharray:3 2}svg.chart text.cpath{fill:#1d2330}"
)
"""The pictures' styles (the report's stylesheet holds them: one copy for every picture of a page)."""

_W, _LEFT, _RIGHT, _TOP, _PANEL, _GAP = 720, 58, 12, 22, 80, 26
_MARGIN_LOW, _MARGIN_HIGH = -4.0, 2.0  # log10 of the margin axis: 1e-4 to 100 nats


def _e(text: object) -> str:
    return html.escape(clean(str(text)), quote=True)


def _x(step: int, steps: int) -> int:
    span = _W - _LEFT - _RIGHT
    return round(_LEFT + (span * step / (steps - 1) if steps > 1 else span / 2))


def _y(top: int, frac: float) -> int:
    return round(top + _PANEL * (1 - min(max(frac, 0.0), 1.0)))


def _num(value: float) -> str:
    return f"{value:.3g}" if math.isfinite(value) else str(value)


def _open(height: int, title: str) -> str:
    head = f'<svg class="chart" width="{_W}" height="{height}" viewBox="0 0 {_W} {height}" role="img">'
    return f"{head}<title>{_e(title)}</title>"


def _axis(top: int, label: str, ticks: Sequence[tuple[float, str]]) -> list[str]:
    """A panel's frame, its grid lines at `ticks` (fractions of the height from the bottom, one path) and labels."""
    grid = "".join(f"M{_LEFT} {_y(top, f)}H{_W - _RIGHT}" for f, _ in ticks)
    parts = [f'<rect class="cfr" x="{_LEFT}" y="{top}" width="{_W - _LEFT - _RIGHT}" height="{_PANEL}"/>']
    parts.append(f'<path class="cgr" d="{grid}"/>')
    parts += [f'<text class="ctk" x="{_LEFT - 4}" y="{_y(top, f) + 3}">{_e(text)}</text>' for f, text in ticks]
    parts.append(f'<text class="cmd" transform="translate(10 {top + _PANEL // 2}) rotate(-90)">{_e(label)}</text>')
    return parts


def _series(
    panels: Sequence[tuple[Sequence[tuple[int, float, str]], int]], steps: int, side: str, mark: int | None
) -> list[str]:
    """A side's lines (class `side`), one per panel through its (step, fraction of the height, title) points at the
    panel's top, in step units scaled to the panel's width (short coordinates; the stroke does not scale); a dot
    with its title at step `mark` (the split) on the first panel."""
    if not any(values for values, _ in panels):
        return []
    scale = (_W - _LEFT - _RIGHT) / (steps - 1) if steps > 1 else 1.0
    shift = _LEFT if steps > 1 else _x(0, 1)
    lines = "".join(
        '<polyline points="' + " ".join(f"{s},{_y(top, f)}" for s, f, _ in values) + '"/>' for values, top in panels
    )
    parts = [f'<g class="{side}" transform="translate({shift} 0) scale({scale:.4g} 1)">{lines}</g>']
    values, top = panels[0]
    parts += [
        f'<circle class="{side}" cx="{_x(s, steps)}" cy="{_y(top, f)}" r="3"><title>{_e(t)}</title></circle>'
        for s, f, t in values
        if s == mark
    ]
    return parts


def _margin_fraction(margin: float) -> float:
    if math.isnan(margin):
        return 0.0
    if math.isinf(margin):
        return 1.0
    value = math.log10(max(margin, 10**_MARGIN_LOW))
    return (value - _MARGIN_LOW) / (_MARGIN_HIGH - _MARGIN_LOW)


def _sides(prompt: PromptTrace | None, name: str) -> tuple[list[tuple[int, float, str]], list[tuple[int, float, str]]]:
    probs, margins = [], []
    for s, step in enumerate(prompt.steps if prompt is not None else ()):
        p = math.exp(min(step.logprob, 0.0)) if math.isfinite(step.logprob) else 0.0
        title = f"{name} step {s}: {display_token(step.token)} p={p:.3g} margin={_num(step.margin)}"
        probs.append((s, p, title))
        margins.append((s, _margin_fraction(step.margin), title))
    return probs, margins


def prompt_chart(
    expected: PromptTrace | None,
    actual: PromptTrace | None,
    *,
    split: int | None = None,
    tolerated: bool = False,
    tie_tol: float = 0.0,
    names: tuple[str, str] = ("expected", "actual"),
    path_split: int | None = None,
) -> str:
    """One prompt's two sides over the steps (see the module docstring); `split` is the first divergence's step,
    `path_split` where the tokens differ when that is later (a value drift first), marked too."""
    steps = max(len(expected.steps) if expected else 0, len(actual.steps) if actual else 0, 1)
    top_p, top_m = _TOP, _TOP + _PANEL + _GAP
    height = top_m + _PANEL + 18
    title = f"{names[0]} (solid) and {names[1]} (dashed): p(chosen) and margin over {steps} steps"
    if split is not None:
        title += f"; split at step {split}" + (" (a near tie)" if tolerated else "")
    parts = [_open(height, title)]
    if split is not None:
        x = _x(split, steps)
        parts.append(
            f'<rect class="csh" x="{x}" y="{_TOP}" width="{max(_W - _RIGHT - x, 0)}" height="{top_m + _PANEL - _TOP}"/>'
        )
    parts += _axis(top_p, "p(chosen)", [(0.0, "0"), (0.5, "0.5"), (1.0, "1")])
    ticks = [((v - _MARGIN_LOW) / (_MARGIN_HIGH - _MARGIN_LOW), f"1e{v:+d}" if v else "1") for v in (-4, -2, 0, 2)]
    parts += _axis(top_m, "margin", ticks)
    if tie_tol > 0:
        y = _y(top_m, _margin_fraction(tie_tol))
        parts.append(
            f'<path class="ctol" d="M{_LEFT} {y}H{_W - _RIGHT}"/>'
            f'<text class="ctk ctie" x="{_W - _RIGHT - 2}" y="{y - 3}">tie_tol {tie_tol:g}</text>'
        )
    for prompt, name, side in ((expected, names[0], "cexp"), (actual, names[1], "cnew")):
        probs, margins = _sides(prompt, name)
        parts += _series([(probs, top_p), (margins, top_m)], steps, side, split)
    if split is not None:
        x, kind = _x(split, steps), "ctie" if tolerated else "csp"
        parts.append(
            f'<path class="csplit {kind}" d="M{x} {_TOP - 4}V{top_m + _PANEL}"/><text class="{kind}" x="{x + 3}" '
            f'y="{_TOP - 8}">{"near tie" if tolerated else "diverges"} at step {split}</text>'
        )
    if path_split is not None and path_split != split:
        x = _x(path_split, steps)
        parts.append(
            f'<path class="cpath" d="M{x} {_TOP}V{top_m + _PANEL + 4}"/><text class="cpath" x="{x + 3}" '
            f'y="{top_m + _PANEL + 14}">path splits at step {path_split}</text>'
        )
    legend = height - 4
    parts.append(f'<text class="ctk" x="{_W - _RIGHT}" y="{legend}">step 0 to {steps - 1}</text></svg>')
    return "".join(parts)


def kld_chart(per_step: Sequence[tuple[int, float]], limits: Mapping[str, float], *, exact: bool) -> str:
    """A prompt's KLD per (step, kld) against the budget's KLD `limits` (log scale; steps above a limit in red)."""
    values = [k for _, k in per_step if math.isfinite(k)]
    limit_values = [v for v in limits.values() if v > 0]
    high = math.log10(max([*values, *limit_values, 1e-6]) * 3)
    low = min(high - 3, math.log10(max(min([v for v in values if v > 0], default=1e-6), 1e-9)))
    steps = max((s for s, _ in per_step), default=0) + 1
    height = _TOP + _PANEL + 22
    what = "KLD" if exact else "KLD lower bound"
    parts = [_open(height, f"{what} per step over {steps} steps" + (f" against {', '.join(limits)}" if limits else ""))]

    def frac(value: float) -> float:
        return (math.log10(max(value, 10**low)) - low) / (high - low)

    parts += _axis(_TOP, what, [(frac(10.0**e), f"1e{e}") for e in range(math.ceil(low), math.floor(high) + 1)])
    for key, value in limits.items():
        y = _y(_TOP, frac(value))
        parts.append(
            f'<path class="climit clim" d="M{_LEFT} {y}H{_W - _RIGHT}"/>'
            f'<text class="ctk csp" x="{_W - _RIGHT - 2}" y="{y - 3}">{_e(key)} {value:.3g}</text>'
        )
    points = [(s, frac(k), f"step {s}: {what} {_num(k)}") for s, k in per_step]
    parts += _series([(points, _TOP)], steps, "cnew", None)
    worst_limit = min(limit_values, default=math.inf)
    parts += [
        f'<circle class="cover" cx="{_x(s, steps)}" cy="{_y(_TOP, frac(k))}" r="3.4">'
        f"<title>step {s}: {what} {_num(k)} over {worst_limit:.3g}</title></circle>"
        for s, k in per_step
        if k > worst_limit
    ]
    parts.append(
        f'<text x="{_LEFT}" y="{_TOP + _PANEL + 16}">{_e(what)} of the candidate against the reference, per step'
        f'</text><text class="ctk" x="{_W - _RIGHT}" y="{_TOP + _PANEL + 16}">step 0 to {steps - 1}</text></svg>'
    )
    return "".join(parts)
