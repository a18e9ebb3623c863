"""README.md's code blocks, as the tests that run or check them read them: a block between the section markers the
documentation site includes (``<!-- --8<-- [start:NAME] -->`` ... ``[end:NAME]``), or the n-th fenced block."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.M | re.S)


def readme_text() -> str:
    return README.read_text(encoding="utf-8")


def section(name: str) -> tuple[str, str]:
    """(language, code) of the one fenced block between README's `name` markers."""
    text = readme_text()
    found = re.findall(rf"<!-- --8<-- \[start:{name}\] -->\n(.*?)<!-- --8<-- \[end:{name}\] -->", text, re.S)
    assert len(found) == 1, f"README.md has {len(found)} sections named {name!r}, not one"
    (block,) = FENCE.findall(found[0])
    return block[0], block[1]


def fenced_blocks() -> list[tuple[str, str]]:
    """Every fenced block of README.md, in order: (language, code)."""
    return FENCE.findall(readme_text())
