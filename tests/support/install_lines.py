"""The one rule for "installs genguard by its package name", which PyPI does not have (README's install section
installs it from a clone): the docs' pages (`tests/project/test_docs.py`) and genguard's own messages (an engine's
install command) are held to it."""

from __future__ import annotations

import re

# `pytest-genguard` as a package name on a pip line: not the end of a path (`/path/to/pytest-genguard[quant]`).
BY_NAME = re.compile(r"\bpip install\b.*?(?<![/\w.-])pytest-genguard(?![\w/-])")


def installs_by_name(text: str) -> list[str]:
    """The lines of `text` that install genguard by its package name (a shell comment after the command is no
    install)."""
    return [line.strip() for line in text.splitlines() if BY_NAME.search(line.split(" # ", 1)[0])]
