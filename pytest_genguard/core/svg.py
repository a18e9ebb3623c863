"""Pictures for the HTML report, as inline SVG (no script, no font, no network): what a reviewer looks at first.

- `prompt_chart`: one prompt of a comparison, both sides over the steps: the chosen token's probability (upper
  panel) and the top-1/top-2 margin (lower panel, log scale, with the tie tolerance under which a split is a near
  tie), the first divergence marked (red, or purple when tolerated) and the steps after it shaded (the paths differ
  there: their values are not compared).
- `kld_chart`: a fidelity judgement's KLD per step (log scale) against the budget's KLD limits, steps above a limit
  in red.

Every text is escaped; each point carries a ``<title>`` (its step, token and values) for hovering. Standard library
only.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence

from pytest_genguard.core.text import display_token
from pytest_genguard.core.trace import PromptTrace

__all__ = ["EXPECTED_COLOUR", "NEW_COLOUR", "kld_chart", "prompt_chart"]

EXPECTED_COLOUR = "#2f5fb3"
NEW_COLOUR = "#d9480f"
_SPLIT, _TIE, _GRID, _SHADE = "#c62828", "#6a5acd", "#e1e4ea", "#f1f3f6"
_W, _LEFT, _RIGHT, _TOP, _PANEL, _GAP = 720, 58, 12, 22, 80, 26
_MARGIN_LOW, _MARGIN_HIGH = -4.0, 2.0  # log10 of the margin axis: 1e-4 to 100 nats
_POINTS = 240  # more steps than this: lines without a dot (and its title) per step


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _x(step: int, steps: int) -> float:
    span = _W - _LEFT - _RIGHT
    return _LEFT + (span * step / (steps - 1) if steps > 1 else span / 2)


def _num(value: float) -> str:
    return f"{value:.3g}" if math.isfinite(value) else str(value)


def _axis(top: float, label: str, ticks: Sequence[tuple[float, str]]) -> list[str]:
    """A panel's frame, its horizontal grid lines at `ticks` (fractions of the height from the bottom) and label."""
    parts = [
        f'<rect x="{_LEFT}" y="{top}" width="{_W - _LEFT - _RIGHT}" height="{_PANEL}" fill="none" stroke="#c5cad3"/>'
    ]
    for frac, text in ticks:
        y = top + _PANEL * (1 - frac)
        parts.append(f'<line x1="{_LEFT}" x2="{_W - _RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="{_GRID}"/>')
        parts.append(f'<text x="{_LEFT - 4}" y="{y + 3:.1f}" text-anchor="end">{_e(text)}</text>')
    parts.append(
        f'<text x="10" y="{top + _PANEL / 2:.1f}" transform="rotate(-90 10 {top + _PANEL / 2:.1f})" '
        f'text-anchor="middle">{_e(label)}</text>'
    )
    return parts


def _series(values: Sequence[tuple[int, float, str]], steps: int, top: float, colour: str, dash: str = "") -> list[str]:
    """A side's line through (step, fraction of the panel height, title) points, and a dot per step (few steps)."""
    if not values:
        return []
    coords = [(_x(s, steps), top + _PANEL * (1 - min(max(f, 0.0), 1.0)), t) for s, f, t in values]
    dashed = f' stroke-dasharray="{dash}"' if dash else ""
    path = " ".join(f"{x:.1f},{y:.1f}" for x, y, _ in coords)
    parts = [f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="1.6"{dashed}/>']
    if len(coords) <= _POINTS:
        parts += [
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.4" fill="{colour}"><title>{_e(t)}</title></circle>'
            for x, y, t in coords
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
) -> str:
    """One prompt's two sides over the steps (see the module docstring); `split` is the first divergence's step."""
    steps = max(len(expected.steps) if expected else 0, len(actual.steps) if actual else 0, 1)
    height = _TOP + 2 * _PANEL + _GAP + 18
    top_p, top_m = _TOP, _TOP + _PANEL + _GAP
    label = f"{names[0]} and {names[1]}: the chosen token's probability and the top-1/top-2 margin over {steps} steps"
    if split is not None:
        label += f"; first divergence at step {split}" + (" (a near tie)" if tolerated else "")
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{_W}" height="{height}" '
        f'viewBox="0 0 {_W} {height}" role="img" aria-label="{_e(label)}" font-size="10" '
        'font-family="system-ui,sans-serif" fill="#445">',
        f"<title>{_e(label)}</title>",
    ]
    if split is not None:
        x = _x(split, steps)
        parts.append(
            f'<rect x="{x:.1f}" y="{_TOP}" width="{max(_W - _RIGHT - x, 0):.1f}" height="{2 * _PANEL + _GAP}" '
            f'fill="{_SHADE}"/>'
        )
    parts += _axis(top_p, "p(chosen)", [(0.0, "0"), (0.5, "0.5"), (1.0, "1")])
    ticks = [((v - _MARGIN_LOW) / (_MARGIN_HIGH - _MARGIN_LOW), f"1e{v:+.0f}" if v else "1") for v in (-4, -2, 0, 2)]
    parts += _axis(top_m, "margin", ticks)
    if tie_tol > 0:
        y = top_m + _PANEL * (1 - _margin_fraction(tie_tol))
        parts.append(
            f'<line x1="{_LEFT}" x2="{_W - _RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="{_TIE}" stroke-dasharray="2 3"/>'
            f'<text x="{_W - _RIGHT - 2}" y="{y - 3:.1f}" text-anchor="end" fill="{_TIE}">tie_tol {tie_tol:g}</text>'
        )
    for prompt, name, colour, dash in (
        (expected, names[0], EXPECTED_COLOUR, ""),
        (actual, names[1], NEW_COLOUR, "5 3"),
    ):
        probs, margins = _sides(prompt, name)
        parts += _series(probs, steps, top_p, colour, dash) + _series(margins, steps, top_m, colour, dash)
    if split is not None:
        x, colour = _x(split, steps), _TIE if tolerated else _SPLIT
        parts.append(
            f'<line class="split" x1="{x:.1f}" x2="{x:.1f}" y1="{_TOP - 4}" y2="{top_m + _PANEL}" stroke="{colour}" '
            f'stroke-width="2"/><text x="{x + 3:.1f}" y="{_TOP - 8}" fill="{colour}">'
            f"{'near tie' if tolerated else 'diverges'} at step {split}</text>"
        )
    legend_y = top_m + _PANEL + 16
    for i, (name, colour, dash) in enumerate(((names[0], EXPECTED_COLOUR, ""), (names[1], NEW_COLOUR, "5 3"))):
        x = _LEFT + i * 120
        dashed = f' stroke-dasharray="{dash}"' if dash else ""
        parts.append(
            f'<line x1="{x}" x2="{x + 22}" y1="{legend_y - 3}" y2="{legend_y - 3}" stroke="{colour}" '
            f'stroke-width="2"{dashed}/><text x="{x + 26}" y="{legend_y}">{_e(name)}</text>'
        )
    parts.append(f'<text x="{_W - _RIGHT}" y="{legend_y}" text-anchor="end">step 0 to {steps - 1}</text></svg>')
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
    label = f"{what} per step over {steps} steps" + (f" against {', '.join(limits)}" if limits else "")
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{_W}" height="{height}" '
        f'viewBox="0 0 {_W} {height}" role="img" aria-label="{_e(label)}" font-size="10" '
        'font-family="system-ui,sans-serif" fill="#445">',
        f"<title>{_e(label)}</title>",
    ]

    def frac(value: float) -> float:
        return (math.log10(max(value, 10**low)) - low) / (high - low)

    ticks = [(frac(10.0**e), f"1e{e}") for e in range(math.ceil(low), math.floor(high) + 1)]
    parts += _axis(_TOP, what, ticks)
    worst_limit = min(limit_values, default=math.inf)
    for key, value in limits.items():
        y = _TOP + _PANEL * (1 - frac(value))
        parts.append(
            f'<line class="limit" x1="{_LEFT}" x2="{_W - _RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="{_SPLIT}" '
            f'stroke-dasharray="4 3"/><text x="{_W - _RIGHT - 2}" y="{y - 3:.1f}" text-anchor="end" '
            f'fill="{_SPLIT}">{_e(key)} {value:.3g}</text>'
        )
    points = [(s, frac(k), f"step {s}: {what} {_num(k)}") for s, k in per_step]
    parts += _series(points, steps, _TOP, NEW_COLOUR)
    over = [(s, k) for s, k in per_step if k > worst_limit]
    parts += [
        f'<circle cx="{_x(s, steps):.1f}" cy="{_TOP + _PANEL * (1 - frac(k)):.1f}" r="3.4" fill="{_SPLIT}">'
        f"<title>step {s}: {what} {_num(k)} over {worst_limit:.3g}</title></circle>"
        for s, k in over
    ]
    parts.append(
        f'<text x="{_LEFT}" y="{_TOP + _PANEL + 16}">{_e(what)} of the candidate against the reference, per step'
        f'</text><text x="{_W - _RIGHT}" y="{_TOP + _PANEL + 16}" text-anchor="end">step 0 to {steps - 1}</text></svg>'
    )
    return "".join(parts)
