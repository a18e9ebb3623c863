"""The HTML report: one self-contained, escaped file that draws what changed (rendering checked without a browser)."""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Sequence
from html.parser import HTMLParser
from pathlib import Path

import pytest
import trace_builder

from pytest_genguard.core import html
from pytest_genguard.core.compare import compare
from pytest_genguard.core.events import from_json
from pytest_genguard.core.files import atomic_write_text
from pytest_genguard.core.text import display_token
from pytest_genguard.core.trace import GenerationTrace, ModelFingerprint
from pytest_genguard.plugin import report
from pytest_genguard.plugin.tally import Tally

VOCAB = {
    0: "<|endoftext|>",
    1: " the",
    2: " quick",
    3: " brown",
    4: " fox",
    5: "\udce2\udc82",  # the first two bytes of a three-byte UTF-8 character, as record() stores them
    6: "</script><script>alert(1)</script>",
    7: "\n",
}


def make_trace(
    path: Sequence[int],
    *,
    alternatives: dict[int, Sequence[tuple[int, float]]] | None = None,
    weights: str = "a" * 64,
    environment: dict[str, str] | None = None,
    prompt: str = "the quick",
) -> GenerationTrace:
    """A one-prompt float32 trace: at each step the chosen token at logprob -0.05, then the given alternatives."""
    steps = []
    for i, tid in enumerate(path):
        alts = (alternatives or {}).get(i) or [(t, -3.0 - k) for k, t in enumerate(t for t in VOCAB if t != tid)][:4]
        steps.append(trace_builder.step([(tid, -0.05), *alts], text=VOCAB))
    model = ModelFingerprint("gpt2", "c" * 64, weights, 1234, "float32")
    return trace_builder.trace(steps, prompts=[prompt], finish=None, model=model, environment=environment)


def failure_event(expected: GenerationTrace, actual: GenerationTrace, nodeid: str = "t.py::test_greedy") -> dict:
    cmp = compare(expected, actual)
    text = str(cmp)
    return {
        "kind": "snapshot",
        "verdict": str(cmp.verdict),
        "failure": not cmp.ok,
        "summary": text.splitlines()[0],
        "detail": text,
        "expected": expected.to_json(),
        "actual": actual.to_json(),
        "name": nodeid.rsplit("::", 1)[-1],
    }


class Elements(HTMLParser):
    """Every start tag with its attributes, and the page's text."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(page: str) -> Elements:
    parser = Elements()
    parser.feed(page)
    return parser


def with_class(doc: Elements, name: str) -> list[dict[str, str | None]]:
    return [attrs for _, attrs in doc.tags if name in (attrs.get("class") or "").split()]


def run_report(*events: tuple[str, dict]) -> str:
    tally = Tally()
    for nodeid, event in events:
        tally.add(nodeid, [from_json(event)])
    return report.render_run_report(tally)


REGRESSED = (
    make_trace([3, 4, 5, 6, 7, 0]),
    make_trace([3, 4, 6, 5, 7, 0], environment={"torch": "2.14.0", "device": "cpu"}),
)


def test_failure_report_draws_both_paths_side_by_side_with_the_first_divergence_highlighted() -> None:
    page = run_report(("t.py::test_greedy", failure_event(*REGRESSED)))
    doc = parse(page)
    marked = with_class(doc, html.DIVERGENCE)
    assert len(marked) == 1
    assert marked[0].get("id") == html.DIVERGENCE
    rows = [attrs for tag, attrs in doc.tags if tag == "tr"]
    step_rows = rows[-6:]  # header + 6 steps of the one prompt table (the environment table comes first)
    assert step_rows.index(marked[0]) == 2  # step 2 is where the paths split
    assert len(with_class(doc, "after")) == 3  # steps after the split are dimmed: they do not count
    assert "regression" in page and "t.py::test_greedy" in page


def test_every_step_shows_its_top_k_as_probability_bars_of_exp_logprob() -> None:
    quarter = {0: [(4, math.log(0.25)), (1, math.log(0.125))], 1: [(1, -4.0), (2, -5.0)]}
    expected = make_trace([3, 0], alternatives=quarter)
    actual = make_trace([4, 0], alternatives={0: [(3, -0.06), (1, -3.0)], 1: [(1, -4.0), (2, -5.0)]})
    page = run_report(("t.py::test_bars", failure_event(expected, actual)))
    widths = re.findall(r'<i style="width:([0-9.]+)%">', page)
    assert len(widths) == 2 * 2 * 3  # two sides, two steps, three candidates each
    assert "25.0" in widths and "12.5" in widths and f"{100 * math.exp(-0.05):.1f}" in widths


def test_other_sides_token_is_marked_in_the_top_k_at_a_near_tie() -> None:
    expected = make_trace([3, 0], alternatives={0: [(4, -0.0505)]})
    actual = make_trace([4, 0], alternatives={0: [(3, -0.0505)]})
    event = failure_event(expected, actual)
    event["failure"] = True
    page = run_report(("t.py::test_tie", event))
    doc = parse(page)
    assert "tolerated divergence" in page
    assert with_class(doc, "tol") == with_class(doc, html.DIVERGENCE)
    assert len(with_class(doc, "o")) == 2  # each side's top-k marks the token the other side chose


def test_every_string_is_escaped_so_a_token_cannot_inject_markup() -> None:
    page = run_report(("t.py::test_<b>node</b>", failure_event(*REGRESSED)))
    assert page.count("<script>") == 1  # only the report's own script
    assert "alert(1)</script>" not in page
    assert "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<b>node</b>" not in page and "test_&lt;b&gt;node&lt;/b&gt;" in page


def test_bytes_of_incomplete_characters_show_as_byte_escapes_and_the_file_is_valid_utf8(tmp_path: Path) -> None:
    page = run_report(("t.py::test_greedy", failure_event(*REGRESSED)))
    target = tmp_path / "report.html"
    atomic_write_text(target, page)
    text = target.read_bytes().decode("utf-8")  # strict: a lone surrogate would have made the write fail
    assert "\\xe2\\x82" in text
    assert display_token("\udce2\udc82 a\n") == "\\xe2\\x82\u2423a\\n"


def test_environment_fields_that_differ_are_listed() -> None:
    doc = parse(run_report(("t.py::test_greedy", failure_event(*REGRESSED))))
    text = " ".join(doc.text)
    assert "environment fields that differ" in text
    assert re.search(r"torch\s+2\.13\.0\s+2\.14\.0", text)
    assert "device" not in text.split("environment fields that differ")[1].split("tolerances")[0]


def test_stale_verdict_says_why_the_snapshot_is_stale() -> None:
    expected = make_trace([3, 4, 0])
    actual = make_trace([3, 5, 0], weights="b" * 64)
    page = run_report(("t.py::test_stale", failure_event(expected, actual)))
    assert 'class="v v-stale"' in page
    assert "why stale" in page and "model changed: weights aaaaaaaaaaaa -&gt; bbbbbbbbbbbb" in page


def test_invariant_failures_are_listed_with_their_message() -> None:
    event = {"kind": "invariant", "name": "assert_no_repetition", "ok": False, "failure": True, "summary": "loop x3"}
    page = run_report(("t.py::test_loop", event))
    assert "assert_no_repetition" in page and "loop x3" in page and 'class="v v-failed"' in page
    assert "1 of 1 checks failed" in page


def test_a_corrupt_trace_in_an_event_is_named_in_the_report_not_raised() -> None:
    event = failure_event(*REGRESSED)
    event["actual"] = '{"schema": 1, "prompts": [{}]}'
    page = run_report(("t.py::test_greedy", event))
    assert "t.py::test_greedy (actual): prompts[0]: missing key" in page
    assert "full message" in page  # the textual explanation is still there


def test_a_run_where_everything_held_gets_a_short_all_checks_held_page() -> None:
    tally = Tally()
    tally.add("t.py::a", [from_json({"kind": "snapshot", "verdict": "identical", "failure": False})])
    tally.add(
        "t.py::b", [from_json({"kind": "invariant", "name": "assert_no_repetition", "ok": True, "failure": False})]
    )
    page = report.render_run_report(tally)
    assert "all 2 checks held" in page
    assert "snapshots: 1 matched" in page and "invariants: 1 checked, 0 failed" in page
    assert len(page) < 8000


def test_the_report_loads_nothing_from_outside_the_file() -> None:
    page = run_report(("t.py::test_greedy", failure_event(*REGRESSED)))
    doc = parse(page)
    assert not [tag for tag, attrs in doc.tags if "src" in attrs or tag in ("link", "iframe", "img", "object")]
    assert not [attrs for tag, attrs in doc.tags if tag == "a" and not (attrs.get("href") or "#").startswith("#")]
    assert not re.search(r"https?://|url\(|@import|@font-face", page)


def test_atomic_write_keeps_the_old_report_when_the_write_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "report.html"
    atomic_write_text(target, "old")
    umask = os.umask(0o022)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask  # readable like any file the user writes, not 0600

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_text(target, "new")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]  # no temp file left behind


def test_a_ten_failure_report_stays_small() -> None:
    path = [3, 4, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4, 1, 0]  # 24 steps, top-5 each
    broken = [*path[:12], 5, *path[13:]]
    events = [(f"t.py::test_{i}", failure_event(make_trace(path), make_trace(broken))) for i in range(10)]
    page = run_report(*events)
    size = len(page.encode("utf-8"))
    print(f"10-failure report (24 steps, top-5, one prompt each): {size} bytes")
    doc = parse(page)
    assert len(with_class(doc, html.DIVERGENCE)) == 10
    assert len(with_class(doc, "early")) == 10 * (12 - 3)  # steps well before each split fold away (the script)
    assert len(with_class(doc, "fold")) == 10
    assert size < 400_000


def sharp_trace(drift: dict[int, float] | None = None, **kw: object) -> GenerationTrace:
    """A sharp model's trace: alternatives far below the chosen token (every bar but one reads as 0%), with `drift`
    added to the logprobs of the given alternative ids at step 0."""
    drift = drift or {}
    alts = [(t, lp + drift.get(t, 0.0)) for t, lp in ((1, -9.25), (2, -11.5), (4, -12.75))]
    return make_trace([3, 0], alternatives={0: alts, 1: [(1, -10.0), (2, -13.0)]}, **kw)  # type: ignore[arg-type]


def items_of(page: str) -> list[tuple[str, str]]:
    """(class, text) of every top-k entry, in page order."""
    return [
        (m.group(1) or "", re.sub("<[^>]+>", " ", m.group(2)))
        for m in re.finditer(r"<li(?: class=\"([^\"]*)\")?[^>]*>(.*?)</li>", page)
    ]


def test_logprobs_are_written_beside_the_bars_where_a_sharp_model_draws_them_all_at_zero() -> None:
    page = run_report(("t.py::test_drift", failure_event(sharp_trace(), sharp_trace({2: 0.5}))))
    texts = [text for _, text in items_of(page)]
    assert any("-9.25" in t for t in texts) and any("-11.5" in t for t in texts) and any("-11" in t for t in texts)
    assert re.findall(r'<i style="width:([0-9.]+)%">', page).count("0.0") >= 8  # the bars alone say nothing
    assert '<span class="lp" title="logprob -0.0500000007">-0.05</span>' in page  # the chosen token's own logprob


def test_a_value_that_differs_is_marked_within_and_beyond_tolerance_with_both_values() -> None:
    # float32 tolerance: atol 1e-6 + rtol 1e-4 * |v|, about 1e-3 at -9.25: a 2e-4 drift is within it, 0.5 is not.
    expected, actual = sharp_trace(), sharp_trace({1: 2e-4, 2: 0.5})
    page = run_report(("t.py::test_drift", failure_event(expected, actual)))
    entries = items_of(page)
    within = [(c, t) for c, t in entries if "d" in c.split()]
    beyond = [(c, t) for c, t in entries if "x" in c.split()]
    assert len(within) == 2 and len(beyond) == 2  # each side marks its own value of the two drifted alternatives
    assert all("-9.25" in t or "-9.2498" in t for _, t in within)
    assert any("+0.5" in t for _, t in beyond) and any("-0.5" in t for _, t in beyond)  # the difference is shown
    assert "other side -11.5; difference +0.5" in page  # and both values in the title
    assert len(entries) == 2 * (4 + 3)  # the others are not marked
    unmarked = [c for c, _ in entries if not {"d", "x"} & set(c.split())]
    assert len(unmarked) == len(entries) - 4


def test_an_alternative_missing_from_the_other_sides_top_k_is_marked() -> None:
    expected = make_trace([3, 0], alternatives={0: [(1, -9.0), (2, -10.0)]})
    actual = make_trace([3, 0], alternatives={0: [(1, -9.5), (4, -10.0)]})  # a regressed value, a new id
    page = run_report(("t.py::test_topk", failure_event(expected, actual)))
    assert [c for c, _ in items_of(page) if "n" in c.split()] == ["n", "n"]  # id 2 on one side, id 4 on the other


def test_alternatives_are_named_from_the_traces_token_texts_with_byte_fragments_escaped() -> None:
    texts = {1: " the", 2: " quick", 4: " fox", 9: "\udce2"}  # id 9: the first byte of a three-byte character
    expected = make_trace([3, 0], alternatives={0: [(9, -9.0), (1, -10.0)]})
    expected = dataclasses.replace(expected, token_texts=texts)
    actual = dataclasses.replace(make_trace([3, 0], alternatives={0: [(9, -9.0), (1, -12.0)]}), token_texts=texts)
    page = run_report(("t.py::test_names", failure_event(expected, actual)))
    drawn = "".join(re.findall(r'<ol class="k">.*?</ol>', page))
    assert "#9" not in drawn and "<span>\\xe2</span>" in drawn
    bare = run_report(
        ("t.py::test_names", failure_event(*(dataclasses.replace(t, token_texts={}) for t in (expected, actual))))
    )
    assert "<span>#9</span>" in bare  # an id no trace names stays an id


def test_a_recorded_trace_carries_the_texts_of_its_alternatives() -> None:
    from pytest_genguard.hf.record import record
    from pytest_genguard.hf.tiny import tiny_model, tiny_tokenizer

    trace = record(tiny_model("gpt2"), tiny_tokenizer(), ["the quick", "a"], max_new_tokens=4, top_k=5)
    alternatives = {i for p in trace for s in p.steps for i in s.top_ids} - {s.token_id for p in trace for s in p.steps}
    assert set(trace.token_texts) == alternatives
    assert GenerationTrace.from_json(trace.to_json()).token_texts == trace.token_texts
    page = run_report(("t.py::test_real", failure_event(trace, dataclasses.replace(trace, token_texts={}))))
    assert not re.search(r"<span>#\d+</span>", page)  # every alternative is named (from the expected trace)


@pytest.mark.parametrize(
    ("event", "command"),
    [
        ({"kind": "snapshot", "verdict": "regression"}, "pytest --snapshot-update t.py::test_x"),
        ({"kind": "snapshot", "verdict": "missing"}, "pytest --snapshot-update t.py::test_x"),
        ({"kind": "verify", "verdict": "regression"}, "pytest --snapshot-update t.py::test_x"),
        ({"kind": "snapshot", "verdict": "stale"}, "pytest --genguard-update-stale t.py::test_x"),
        (
            {"kind": "snapshot", "verdict": "regression", "environment_class": "cpu-x86"},
            "pytest --genguard-baselines per-env --snapshot-update t.py::test_x",
        ),
        (
            {"kind": "reference", "verdict": "regression", "reference": "refs/cpu/t.py__test_x.json"},
            "pytest --genguard-record-reference refs t.py::test_x",
        ),
        ({"kind": "invariant", "name": "assert_no_repetition"}, "pytest t.py::test_x"),
    ],
)
def test_each_failure_shows_the_command_that_rerecords_it(event: dict[str, object], command: str) -> None:
    page = run_report(("t.py::test_x", {"failure": True, "summary": "s", **event}))
    assert f"<code>{command}</code>" in page


PROJECT_CONFTEST = """
import pathlib

import pytest

from pytest_genguard.core.trace import GenerationTrace, ModelFingerprint, PromptTrace, Step, TokenizerFingerprint


@pytest.fixture
def make():
    def build(path):
        steps = tuple(Step(t, f" t{t}", -0.1, -0.1, (t, 9), (-0.1, -4.0), -0.1) for t in path)
        prompt = PromptTrace("the quick", (1, 2), steps, "length")
        model = ModelFingerprint("gpt2", "c" * 64, "a" * 64, 1000, "float32")
        return GenerationTrace((prompt,), {"mode": "greedy"}, model, TokenizerFingerprint("tiny", 512, "t" * 64))

    return build


@pytest.fixture
def recording():
    return (pathlib.Path(__file__).parent / "phase.txt").read_text() == "record"
"""

PROJECT_TESTS = """
def test_ok(make, genguard_snapshot):
    assert make([3, 4, 5]) == genguard_snapshot


def test_regressed(make, genguard_snapshot, recording):
    assert make([3, 4, 5] if recording else [3, 7, 5]) == genguard_snapshot
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(PROJECT_CONFTEST)
    pytester.makepyfile(test_project=PROJECT_TESTS)
    pytester.path.joinpath("phase.txt").write_text("record")
    pytester.runpytest("-p", "no:cacheprovider", "--snapshot-update").assert_outcomes(passed=2)
    pytester.path.joinpath("phase.txt").write_text("check")
    return pytester


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_the_report_option_writes_one_file_for_the_run_with_the_failures_drawn(
    project: pytest.Pytester, xdist: list[str]
) -> None:
    result = project.runpytest("-p", "no:cacheprovider", "--genguard-report", "out/report.html", *xdist)
    result.assert_outcomes(passed=1, failed=1)
    target = project.path / "out" / "report.html"
    result.stdout.fnmatch_lines([f"HTML report: {target}"])
    page = target.read_text(encoding="utf-8")
    assert "1 of 2 checks failed" in page
    assert "test_project.py::test_regressed" in page and "test_project.py::test_ok" not in page
    assert "<code>pytest --snapshot-update test_project.py::test_regressed</code>" in page
    doc = parse(page)
    assert [attrs.get("id") for attrs in with_class(doc, html.DIVERGENCE)] == [html.DIVERGENCE]


def test_a_run_where_every_check_held_writes_the_short_report(project: pytest.Pytester) -> None:
    result = project.runpytest("-p", "no:cacheprovider", "-k", "test_ok", "--genguard-report", "report.html")
    result.assert_outcomes(passed=1, deselected=1)
    page = (project.path / "report.html").read_text(encoding="utf-8")
    assert "all 1 checks held" in page


def test_a_report_that_cannot_be_written_is_a_usage_error_at_start_up(project: pytest.Pytester) -> None:
    project.path.joinpath("taken").write_text("a file, not a folder")
    result = project.runpytest("-p", "no:cacheprovider", "-k", "test_ok", "--genguard-report", "taken/report.html")
    assert (
        result.ret == pytest.ExitCode.USAGE_ERROR
    )  # checked at start-up since issue 12 (tests/plugin/test_write_failures.py)
    result.stderr.fnmatch_lines(["ERROR: --genguard-report taken/report.html: */taken is a file, not a folder; *"])
