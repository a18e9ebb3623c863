"""A run's summary as data (`RunSummary`: the failed checks, one `Row` each, the counting lines and what the change
did across the suite) and as markdown, the table a pull request shows (GitHub's job summary, a comment).

The plugin builds it from its tally: it appends the markdown to ``$GITHUB_STEP_SUMMARY`` and carries the data in the
HTML report (`embed`, a ``<script type="application/json">`` element no browser runs), from which
``genguard report --markdown`` writes the same markdown again (`extract`). Many failures are grouped by verdict, each
group folded (``<details>``), and stale snapshots that share a reason name it once. Standard library only.
"""

from __future__ import annotations

import html
import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from pytest_genguard.core.text import clean, plural

__all__ = ["GROUP_OVER", "Row", "RunSummary", "embed", "extract", "render_markdown"]

GROUP_OVER = 10
"""More failed checks than this are grouped by verdict, each group folded."""
DATA_ID = "genguard-summary"
_WHY_WIDTH = 160
_DATA = re.compile(r'<script type="application/json" id="genguard-summary">(.*?)</script>', re.DOTALL)


@dataclass(frozen=True)
class Row:
    """One failed check: the test, its verdict, where it first diverged, one line why, its pending trace's id."""

    test: str
    verdict: str
    first: str = ""
    why: str = ""
    pending: str | None = None
    kind: str = "snapshot"
    reason: str = ""
    """A stale snapshot's reasons (what groups stale rows that changed for one reason)."""


@dataclass(frozen=True)
class RunSummary:
    """What a run found (`rows`: the failed checks), its counting lines and what the change did across the suite."""

    checks: int
    counts: tuple[str, ...] = ()
    rows: tuple[Row, ...] = ()
    change: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "genguard_summary": 1,
            "checks": self.checks,
            "counts": list(self.counts),
            "rows": [asdict(r) for r in self.rows],
            "change": list(self.change),
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> RunSummary:
        """The summary from its `to_json()` form; ValueError when it is not one."""
        if raw.get("genguard_summary") != 1:
            raise ValueError("not a genguard run summary (schema 1)")
        rows = tuple(
            Row(
                str(r["test"]),
                str(r["verdict"]),
                str(r.get("first", "")),
                str(r.get("why", "")),
                None if r.get("pending") is None else str(r["pending"]),
                str(r.get("kind", "snapshot")),
                str(r.get("reason", "")),
            )
            for r in raw.get("rows", ())
        )
        return cls(
            int(raw.get("checks", 0)),
            tuple(str(c) for c in raw.get("counts", ())),
            rows,
            tuple(str(c) for c in raw.get("change", ())),
        )


def embed(summary: RunSummary) -> str:
    """The summary as an HTML element a report carries (JSON that no ``</script>`` inside can end early)."""
    text = json.dumps(summary.to_json(), sort_keys=True)  # ASCII: token texts may hold lone surrogates
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return f'<script type="application/json" id="{DATA_ID}">{text}</script>'


def extract(page: str, source: str) -> RunSummary:
    """The summary an HTML report carries; ValueError naming `source` when it carries none (a report of a trace
    folder, or of a genguard before 0.2)."""
    found = _DATA.search(page)
    if found is None:
        raise ValueError(
            f"{source}: carries no run summary: it is not a report of a pytest run (pytest --genguard-report FILE)"
        )
    try:
        return RunSummary.from_json(json.loads(found.group(1)))
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{source}: its run summary cannot be read: {exc}") from None


# ------------------------------------------------------------------------------------------------------ markdown


def _cell(text: str, width: int = _WHY_WIDTH) -> str:
    """Text safe in a table cell: one line, pipes and HTML escaped, cut to `width`."""
    one = " ".join(clean(text).split())
    if len(one) > width:
        one = one[: width - 3] + "..."
    return one.replace("&", "&amp;").replace("<", "&lt;").replace("|", "\\|")


def _code(text: str) -> str:
    return f"`{text}`" if "`" not in text and "|" not in text else _cell(text, 400)


def _table(rows: Sequence[Row]) -> list[str]:
    lines = ["| test | verdict | first divergence | why |", "| --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {_code(r.test)} | {_cell(r.verdict)} | {_cell(r.first) or '–'} | {_cell(r.why) or '–'} |")
    return lines


def _groups(rows: Sequence[Row]) -> list[str]:
    by_verdict: dict[str, list[Row]] = {}
    for r in rows:
        by_verdict.setdefault(r.verdict, []).append(r)
    lines = []
    for verdict, group in by_verdict.items():
        lines += ["<details>", f"<summary><b>{html.escape(verdict)}</b>: {plural(len(group), 'check')}</summary>", ""]
        reasons = Counter(r.reason for r in group if r.reason)
        if reasons:
            lines += [f"- {_cell(reason, 300)}: {plural(n, 'snapshot')}" for reason, n in reasons.most_common()]
            lines.append("")
        lines += [*_table(group), "", "</details>", ""]
    return lines


def render_markdown(summary: RunSummary, *, title: str = "genguard") -> str:
    """The summary as markdown: a heading with the verdict of the run, the counting lines, a table of the failed
    checks (grouped by verdict when there are more than `GROUP_OVER`), what the change did, and how to review."""
    failed = len(summary.rows)
    if failed:
        head = f"## {title}: {failed} of {plural(summary.checks, 'check')} failed"
    else:
        head = f"## {title}: all {plural(summary.checks, 'check')} held"
    lines = [head, ""]
    lines += [f"{_cell(line, 400)}  " for line in summary.counts]
    lines.append("")
    if failed > GROUP_OVER:
        lines += _groups(summary.rows)
    elif failed:
        lines += [*_table(summary.rows), ""]
    if summary.change:
        lines += ["**What the change did**", "", *(f"- {_cell(line, 400)}" for line in summary.change), ""]
    pending = [r for r in summary.rows if r.pending]
    if pending:
        lines += [
            f"{plural(len(pending), 'new trace')} kept for review in `.genguard/pending` where the tests ran: "
            "`genguard review` there accepts or rejects each without running the model again.",
            "",
        ]
    return "\n".join(lines)
