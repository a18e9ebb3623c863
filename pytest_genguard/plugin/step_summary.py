"""The run's markdown summary in GitHub's job summary: appended to the file ``$GITHUB_STEP_SUMMARY`` names (GitHub
Actions sets it in every step) when genguard checked something, by the process that writes the terminal summary (the
xdist controller). ``GENGUARD_STEP_SUMMARY=0`` leaves it out (the composite action writes it from the HTML report
instead, with ``genguard report --markdown``). The markdown is `core.markdown.render_markdown`'s.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_genguard.core.markdown import render_markdown
from pytest_genguard.plugin.tally import Tally, run_summary

__all__ = ["ENV", "OFF", "append_step_summary"]

ENV = "GITHUB_STEP_SUMMARY"
OFF = "GENGUARD_STEP_SUMMARY"


def append_step_summary(config: pytest.Config, tally: Tally) -> str | None:
    """Append the run's markdown to ``$GITHUB_STEP_SUMMARY``; a line for the terminal when it could not (None when
    it did, or had nothing to do)."""
    target = os.environ.get(ENV, "")
    if not target or not tally.used or os.environ.get(OFF, "") == "0" or hasattr(config, "workerinput"):
        return None
    text = render_markdown(run_summary(tally))
    try:
        with Path(target).open("a", encoding="utf-8") as handle:  # appended: other steps' summaries stay
            handle.write(text + "\n")
    except OSError as exc:
        return f"genguard: could not append the job summary to ${ENV} ({target}): {exc}"
    return None
