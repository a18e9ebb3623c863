"""Dockerfile.cuda read as its instructions, for the tests that check it (tests/project/test_ci_files.py, the CUDA
gate's tests): comments dropped, continuation lines joined, build-argument defaults and the CMD resolved."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile.cuda"


def instructions(text: str | None = None) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs of `text` (default: Dockerfile.cuda), comments dropped, continuations joined."""
    source = DOCKERFILE.read_text(encoding="utf-8") if text is None else text
    logical: list[str] = []
    pending = ""
    for raw in source.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    if pending:
        logical.append(pending)
    pairs = []
    for line in logical:
        instruction, _, arguments = line.partition(" ")
        pairs.append((instruction.upper(), arguments.strip()))
    return pairs


def arg_defaults(text: str | None = None) -> dict[str, str | None]:
    """Every `ARG NAME[=default]`: its default, None when it has none."""
    defaults: dict[str, str | None] = {}
    for name, arguments in instructions(text):
        if name == "ARG":
            key, has_default, value = arguments.partition("=")
            defaults[key] = value if has_default else None
    return defaults


def cmd(text: str | None = None) -> list[str]:
    """The image's command: the one CMD, in exec (JSON) form."""
    (found,) = [arguments for name, arguments in instructions(text) if name == "CMD"]
    argv = json.loads(found)
    assert isinstance(argv, list) and all(isinstance(a, str) for a in argv), (
        f"CMD is not a JSON list of strings: {found}"
    )
    return argv
