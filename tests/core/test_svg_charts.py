"""The report's pictures (`core.svg`): per prompt both sides' probability and margin over the steps with the first
divergence marked where it is; a fidelity judgement's KLD per step against its budget; escaped, script-free SVG. And
the report's settings table: what is set shown, the rest folded."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import trace_builder

from pytest_genguard.core import html
from pytest_genguard.core.compare import compare
from pytest_genguard.core.svg import SVG_CSS, kld_chart, prompt_chart

VOCAB = {0: "<|endoftext|>", 3: " brown", 4: " fox", 5: " <b>dog</b>", 6: " cat"}


def steps(path: list[int], margin: float = 2.0) -> list:
    return [trace_builder.step([(t, -0.2), (6 if t != 6 else 4, -0.2 - margin)], text=VOCAB) for t in path]


def parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)  # well-formed XML, or this raises


def test_a_prompt_chart_draws_both_sides_and_marks_the_split_at_its_step() -> None:
    old = trace_builder.trace(steps([3, 4, 3, 4, 0]), finish=None).prompts[0]
    new = trace_builder.trace(steps([3, 4, 5, 5, 5, 0]), finish=None).prompts[0]
    root = parse(prompt_chart(old, new, split=2, tie_tol=1e-3))
    sides = root.findall("g")
    assert [g.get("class") for g in sides] == ["cexp", "cnew"]  # expected solid, actual dashed (SVG_CSS)
    assert "svg.chart .cnew polyline{stroke:#d9480f;stroke-dasharray:5 3}" in SVG_CSS
    lines = [line for g in sides for line in g.findall("polyline")]  # p and margin for each side
    assert [len(line.get("points", "").split()) for line in lines] == [5, 5, 6, 6]
    dots = root.findall("circle")
    assert [d.get("class") for d in dots] == ["cexp", "cnew"]  # one dot, with its title, per side at the split
    (split,) = [e for e in root.iter("path") if "csplit" in (e.get("class") or "")]
    assert split.get("d", "").startswith("M318 ")  # on step 2 of the six: 58 + 650 * 2 / 5
    assert dots[0].get("cx") == dots[1].get("cx") == "318"
    titles = [t.text or "" for t in root.iter("title")]
    assert "actual step 2: ␣<b>dog</b> p=0.819 margin=2" in titles  # escaped in the markup, text when parsed
    assert "diverges at step 2" in "".join(root.itertext())
    assert "tie_tol 0.001" in "".join(root.itertext())


def test_a_prompt_that_held_has_no_split_and_a_near_tie_is_marked_as_one() -> None:
    p = trace_builder.trace(steps([3, 4, 0]), finish=None).prompts[0]
    held = prompt_chart(p, p)
    assert "csplit" not in held and "diverges" not in held
    tie = prompt_chart(p, p, split=1, tolerated=True)
    assert "near tie at step 1" in tie and 'class="csplit ctie"' in tie


def test_no_chart_carries_a_script_or_a_link() -> None:
    p = trace_builder.trace(steps([3, 5, 0]), finish=None).prompts[0]
    for svg in (prompt_chart(p, p, split=1), kld_chart([(0, 1e-3), (1, 0.5)], {"kld_max": 0.1}, exact=True)):
        assert "<script" not in svg and "href" not in svg and not re.search(r"https?://|url\(", svg)


def test_a_kld_chart_draws_each_limit_and_marks_the_steps_above_it() -> None:
    per_step = [(0, 1e-4), (1, 2e-3), (2, 0.3), (3, 0.02)]
    root = parse(kld_chart(per_step, {"kld_mean": 0.01, "kld_max": 0.1}, exact=False))
    limits = [e for e in root.iter("path") if "climit" in (e.get("class") or "")]
    assert len(limits) == 2
    over = [c for c in root.iter("circle") if c.get("class") == "cover"]
    assert len(over) == 2  # 0.3 and 0.02 are above the tighter limit, 0.01
    assert "KLD lower bound per step" in (root.findtext("title") or "")
    none = parse(kld_chart(per_step, {}, exact=True))
    assert not [e for e in none.iter("path") if "climit" in (e.get("class") or "")]  # control: no budget, no line


def test_the_report_draws_a_chart_per_prompt_of_a_comparison() -> None:
    old = trace_builder.trace(steps([3, 4, 0]), steps([3, 3, 0]), finish=None)
    new = trace_builder.trace(steps([3, 5, 0]), steps([3, 3, 0]), finish=None)
    page = html.Page().comparison(compare(old, new))
    assert page.count('<svg class="chart"') == 2


def test_the_trace_table_shows_the_settings_that_are_set_and_folds_the_rest() -> None:
    trace = trace_builder.trace(
        steps([3, 4, 0]),
        finish=None,
        settings={"max_new_tokens": 3, "mode": "greedy", "top_k": None, "top_p": None, "temperature": None},
    )
    page = html.Page().trace(trace)
    assert "<td>settings.max_new_tokens</td><td>3</td>" in page
    assert "(unset)" not in page
    assert "<summary>3 settings unset</summary>" in page and "settings.temperature, settings.top_k" in page


def test_a_path_that_splits_after_a_value_drift_is_marked_where_it_splits() -> None:
    """SmolLM2 with one layer scaled: step 0's logprob drifts (the first divergence), the tokens split at step 1."""
    p = trace_builder.trace(steps([3, 4, 0]), finish=None).prompts[0]
    later = parse(prompt_chart(p, p, split=0, path_split=1))
    (marker,) = [e for e in later.iter("path") if e.get("class") == "cpath"]
    assert marker.get("d", "").startswith("M383 ")  # step 1 of three: 58 + 650 / 2
    assert "path splits at step 1" in "".join(later.itertext())
    same = prompt_chart(p, p, split=1, path_split=1)  # control: the split is the first divergence, marked once
    assert "cpath" not in same
