"""The HTML report in a real browser: headless Chromium loads it, its script runs without errors, and a screenshot
of it is kept under artifacts/ for a person to look at.

Without Chromium these tests fail when the CI environment variable is set (CI must install it: apt-get install
chromium) and are skipped with that reason on a developer machine.
"""

from __future__ import annotations

import dataclasses
import html as html_module
import json
import os
import re
import shutil
import struct
import subprocess
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
import trace_builder

from pytest_genguard.core import html
from pytest_genguard.core.change import Change, Kld
from pytest_genguard.core.compare import compare
from pytest_genguard.core.events import from_json
from pytest_genguard.core.files import atomic_write_text
from pytest_genguard.core.trace import GenerationTrace, ModelFingerprint, TokenizerFingerprint
from pytest_genguard.plugin import report
from pytest_genguard.plugin.tally import Tally

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--enable-logging=stderr",
    "--v=0",
    "--window-size=1280,900",
)


@pytest.fixture(scope="module")
def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None and Path("/usr/bin/chromium").exists():
        found = "/usr/bin/chromium"
    if found is None:
        reason = "headless Chromium is not installed (Debian: apt-get install chromium)"
        if os.environ.get("CI"):
            pytest.fail(f"{reason}; CI must install it to check the HTML report in a browser")
        pytest.skip(f"{reason}; with CI set this test fails instead")
    return found


@dataclass
class Loaded:
    dom: str
    console: list[str]
    screenshot: Path


def load(chromium: str, page: Path, screenshot: Path, profile: Path) -> Loaded:
    """Load `page` in headless Chromium: the DOM after its scripts ran, its console messages, a screenshot."""
    screenshot.parent.mkdir(parents=True, exist_ok=True)
    cmd = [chromium, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", f"--screenshot={screenshot}", page.as_uri()]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, errors="replace")
    assert done.returncode == 0, f"chromium exited {done.returncode}:\n{done.stderr[-3000:]}"
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]
    return Loaded(dom=done.stdout, console=console, screenshot=screenshot)


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def script_state(dom: str) -> tuple[str | None, str | None]:
    """The report script's marks on <body>: how many divergences it found, and an error it caught."""
    body = re.search(r"<body[^>]*>", dom)
    assert body is not None, dom[:500]
    ready = re.search(r'data-genguard-ready="([^"]*)"', body.group())
    error = re.search(r'data-genguard-error="([^"]*)"', body.group())
    return (ready.group(1) if ready else None), (error.group(1) if error else None)


def _trace(path: list[int], weights: str = "a" * 64, torch: str = "2.13.0") -> GenerationTrace:
    vocab = {0: "<|endoftext|>", 1: " the", 2: " quick", 3: " brown", 4: " fox", 5: "\udce2\udc82", 6: " <b>dog</b>"}
    lps = (-1.6, -2.5, -3.5, -4.5)
    steps = [
        trace_builder.step(
            [(tid, -0.3), *zip([t for t in (3, 4, 6, 1, 0) if t != tid][:4], lps, strict=True)], text=vocab
        )
        for tid in path
    ]
    return trace_builder.trace(
        steps,
        prompts=["the quick"],
        finish=None,
        settings={"max_new_tokens": 12, "mode": "greedy"},
        model=ModelFingerprint("gpt2", "c" * 64, weights, 127_000, "float32"),
        tokenizer=TokenizerFingerprint("genguard-tiny-bpe", 512, "t" * 64),
        environment={"torch": torch, "device": "cpu", "threads": 2},
    )


def _event(expected: GenerationTrace, actual: GenerationTrace) -> dict[str, object]:
    cmp = compare(expected, actual)
    text = str(cmp)
    return {
        "kind": "snapshot",
        "verdict": str(cmp.verdict),
        "failure": True,
        "summary": text.splitlines()[0],
        "detail": text,
        "expected": expected.to_json(),
        "actual": actual.to_json(),
        "name": "greedy",
    }


def test_failure_report_loads_in_chromium_with_its_script_run_and_no_console_errors(
    chromium: str, tmp_path: Path
) -> None:
    path = [3, 4, 1, 2, 3, 4, 1, 2, 3, 0]
    tally = Tally()
    regressed = _trace([3, 4, 1, 6, 5, 4, 1, 2, 3, 0], torch="2.14.0")
    tally.add("tests/test_decoding.py::test_greedy_path", [from_json(_event(_trace(path), regressed))])
    tally.add(
        "tests/test_decoding.py::test_stale", [from_json(_event(_trace(path), _trace([*path[:5], 5, 0], "b" * 64)))]
    )
    tally.add(
        "tests/test_decoding.py::test_ok", [from_json({"kind": "snapshot", "verdict": "identical", "failure": False})]
    )
    page = tmp_path / "report.html"
    atomic_write_text(page, report.render_run_report(tally, context="pytest examples/"))
    shot = ARTIFACTS / "genguard-report-failures.png"
    loaded = load(chromium, page, shot, tmp_path / "profile")
    print(f"screenshot of the failure report: {shot}")
    assert loaded.console == []
    ready, error = script_state(loaded.dom)
    assert error is None
    assert ready == "2"  # the script ran to its end and found both divergences in the rendered DOM
    assert re.search(r'<body[^>]*class="compact"', loaded.dom)  # and folded the agreeing steps before them
    assert f'id="{html.DIVERGENCE}"' in loaded.dom
    assert "&lt;b&gt;dog&lt;/b&gt;" in loaded.dom and "<b>dog</b>" not in loaded.dom
    # the logprobs beside the bars, the values that moved at the split marked, the command that re-records
    assert re.search(r'<li class="o x"[^>]*>.*?<em>-3\.5<b>-3\.2</b></em>', loaded.dom)
    assert "<code>pytest --snapshot-update tests/test_decoding.py::test_greedy_path</code>" in loaded.dom
    assert png_size(shot) == (1280, 900)
    assert shot.stat().st_size > 20_000  # a rendered page, not a blank one


MEASURE = """<script>
document.body.setAttribute("data-chart-boxes", JSON.stringify(Array.from(document.querySelectorAll("svg.chart"),
  function(svg){var r=svg.getBoundingClientRect();return [Math.round(r.width),Math.round(r.height)];})));
</script></body>"""
"""Appended to a copy of the page for the test: each chart's rendered box, written where --dump-dom shows it."""


def test_the_reports_pictures_render_with_boxes_in_chromium(chromium: str, tmp_path: Path) -> None:
    path = [3, 4, 1, 2, 3, 4, 1, 2, 3, 0]
    tally = Tally()
    two_prompts = [_trace(path), _trace([3, 4, 1, 6, 5, 4, 1, 2, 3, 0])]
    expected = dataclasses.replace(two_prompts[0], prompts=(two_prompts[0].prompts[0], two_prompts[0].prompts[0]))
    actual = dataclasses.replace(two_prompts[1], prompts=(two_prompts[0].prompts[0], two_prompts[1].prompts[0]))
    tally.add("tests/test_decoding.py::test_two_prompts", [from_json(_event(expected, actual))])
    judged = Change(
        1,
        (),
        "",
        Kld(
            0.02,
            0.3,
            10,
            False,
            tuple((0, s, 0.001 * 3**s / 20) for s in range(10)),
            {"kld_mean": 0.01, "kld_max": 0.1},
            1,
        ),
    )
    fidelity = {
        **_event(_trace(path), _trace(path)),
        "via": "fidelity",
        "verdict": "regression",
        "change": judged.to_json(),
    }
    tally.add("tests/test_decoding.py::test_int8", [from_json(fidelity)])
    page = tmp_path / "report.html"
    text = report.render_run_report(tally, context="pytest examples/")
    measured = tmp_path / "measured.html"
    atomic_write_text(measured, text.replace("</body>", MEASURE, 1))
    shot = ARTIFACTS / "genguard-report-pictures.png"
    loaded = load(chromium, measured, shot, tmp_path / "profile")
    print(f"screenshot of the report's pictures: {shot}")
    assert loaded.console == []
    assert script_state(loaded.dom)[1] is None
    boxes = re.search(r'data-chart-boxes="([^"]*)"', loaded.dom)
    assert boxes is not None, loaded.dom[:500]
    sizes = json.loads(html_module.unescape(boxes.group(1)))
    assert len(sizes) == 3  # a picture per prompt of the comparison, one for the fidelity judgement's prompt
    assert all(w > 300 and h > 80 for w, h in sizes), sizes  # drawn, not collapsed to nothing
    assert png_size(shot) == (1280, 900) and shot.stat().st_size > 20_000
    atomic_write_text(page, text)
    assert "<script" not in "".join(re.findall(r"<svg.*?</svg>", text, re.S))  # the pictures need no script


def test_the_box_check_sees_a_picture_that_does_not_render(chromium: str, tmp_path: Path) -> None:
    """Negative control: an SVG hidden by its page's style measures zero, and the check above would fail."""
    page = tmp_path / "hidden.html"
    svg = '<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="720" height="120"></svg>'
    page.write_text(f"<!DOCTYPE html><html><head><style>svg{{display:none}}</style></head><body>{svg}{MEASURE}</html>")
    loaded = load(chromium, page, tmp_path / "hidden.png", tmp_path / "profile")
    boxes = re.search(r'data-chart-boxes="([^"]*)"', loaded.dom)
    assert boxes is not None and json.loads(html_module.unescape(boxes.group(1))) == [[0, 0]]


def test_trace_folder_report_loads_in_chromium(chromium: str, tmp_path: Path) -> None:
    files = [
        html.TraceFile("__snapshots__/test_decoding/test_greedy.json", traces=(("", _trace([3, 4, 1, 2, 0])),)),
        html.TraceFile("__snapshots__/broken.json", error="broken.json: not valid JSON"),
    ]
    page = tmp_path / "traces.html"
    atomic_write_text(page, html.render_trace_files(files, root="examples"))
    shot = ARTIFACTS / "genguard-report-traces.png"
    loaded = load(chromium, page, shot, tmp_path / "profile")
    print(f"screenshot of the trace folder report: {shot}")
    assert loaded.console == []
    assert script_state(loaded.dom) == ("0", None)
    assert "test_greedy.json" in loaded.dom and "broken.json: not valid JSON" in loaded.dom
    assert png_size(shot) == (1280, 900)


def test_the_browser_check_catches_a_script_error(chromium: str, tmp_path: Path) -> None:
    """Negative control: a page whose script throws is caught by the same checks the report passes."""
    page = tmp_path / "broken.html"
    page.write_text(
        textwrap.dedent(
            """\
            <!DOCTYPE html><html><body><p>x</p><script>
            document.body.setAttribute("data-genguard-ready", String(undefinedFunction()));
            </script></body></html>
            """
        )
    )
    loaded = load(chromium, page, tmp_path / "broken.png", tmp_path / "profile")
    assert any("Uncaught ReferenceError" in line for line in loaded.console)
    assert script_state(loaded.dom)[0] is None
