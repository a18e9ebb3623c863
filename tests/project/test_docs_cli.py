"""docs/cli.md documents the `genguard` console script that the code builds: every subcommand its parser has, in a
section of its own, with every option and argument. The parser is read by recording what `build_parser(full=True)`
adds (not from `--help` text), so an option added to the cli package without a line in the docs fails here."""

from __future__ import annotations

import argparse
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from pytest_genguard import cli
from pytest_genguard.bisection.report import EXIT_CODES
from pytest_genguard.core import gate
from pytest_genguard.serving import check

ROOT = Path(__file__).resolve().parents[2]
CLI_DOC = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")


def parser_arguments(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """Each subcommand of `genguard` and its arguments as a user writes them: option strings, and positionals by their
    metavar; recorded from the public `add_argument` calls `cli.build_parser(full=True)` makes (every subcommand's
    arguments at once; argparse's own -h/--help left out)."""
    found: dict[str, list[str]] = defaultdict(list)
    add_argument = argparse.ArgumentParser.add_argument

    def recording(self: argparse.ArgumentParser, *names: str, **kwargs: Any) -> argparse.Action:
        if names not in (("-h", "--help"),):
            words = list(names) if names[0].startswith("-") else [str(kwargs.get("metavar", names[0].upper()))]
            found[self.prog].extend(words)
        return add_argument(self, *names, **kwargs)

    monkeypatch.setattr(argparse.ArgumentParser, "add_argument", recording)
    cli.build_parser(full=True)
    return {prog.removeprefix("genguard "): words for prog, words in found.items() if prog != "genguard"}


def sections(markdown: str) -> dict[str, str]:
    """The text under each `## ` heading of a page, by heading."""
    parts = re.split(r"^## (.+)$", markdown, flags=re.M)
    return {heading.strip(): body for heading, body in zip(parts[1::2], parts[2::2], strict=True)}


def _names(word: str, text: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", text) is not None


def cli_doc_problems(doc: str, commands: dict[str, list[str]]) -> list[str]:
    """What `doc` leaves out: a subcommand without its `## genguard NAME` section; in that section, an option without
    a table row of its own (`| `--top K` | what it does |`), or a positional argument not in its usage block."""
    by_heading = sections(doc)
    problems = []
    for command, words in commands.items():
        body = by_heading.get(f"genguard {command}")
        if body is None:
            problems.append(f"no section '## genguard {command}'")
            continue
        rows = " ".join(re.findall(r"^\| (`(?:\\\||[^|])+`) \|", body, re.M))  # first cells (`\|` inside one)
        usage = " ".join(re.findall(r"^```\w*\n(.*?)^```$", body, re.M | re.S))
        problems += [
            f"genguard {command}: {word} is not documented"
            for word in words
            if not _names(word, rows if word.startswith("-") else usage)
        ]
    return problems


def exit_codes(doc: str, command: str) -> set[int]:
    """The exit codes the `genguard COMMAND` section's table lists (rows `| N | meaning |`)."""
    return {int(code) for code in re.findall(r"^\| (\d) \|", sections(doc)[f"genguard {command}"], re.M)}


def test_the_recorded_parser_has_the_commands_and_options_the_script_parses(monkeypatch: pytest.MonkeyPatch) -> None:
    # The recording reads what argparse was given: it finds an option the script really accepts, and no --help.
    commands = parser_arguments(monkeypatch)
    assert {"show", "diff", "fidelity", "bisect", "check-server", "report"} <= set(commands)
    assert {"FILE", "--prompt", "--top", "--reference"} <= set(commands["show"])
    assert "--help" not in commands["show"]
    assert cli.build_parser().parse_args(["show", "x.genguard", "--top", "3"]).top == 3


def test_docs_cli_documents_every_subcommand_and_option_of_the_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    problems = cli_doc_problems(CLI_DOC, parser_arguments(monkeypatch))
    assert not problems, "docs/cli.md is behind the cli package's parser:\n" + "\n".join(problems)


def test_the_cli_doc_check_fails_on_a_removed_line(monkeypatch: pytest.MonkeyPatch) -> None:
    # Negative control: the page with the line documenting `show --top` removed, or without the fidelity section.
    commands = parser_arguments(monkeypatch)
    lines = CLI_DOC.splitlines(keepends=True)
    (top,) = [i for i, line in enumerate(lines) if line.startswith("| `--top")]
    assert cli_doc_problems("".join(lines[:top] + lines[top + 1 :]), commands) == [
        "genguard show: --top is not documented"
    ]
    without_fidelity = CLI_DOC.replace("## genguard fidelity", "## fidelity")
    assert "no section '## genguard fidelity'" in cli_doc_problems(without_fidelity, commands)


def test_docs_cli_lists_the_exit_codes_the_commands_return() -> None:
    # check-server's and bisect's codes are constants of their modules; bad input is 2 everywhere (cli.EXIT_USAGE).
    serving = {check.EXIT_OK, check.EXIT_REGRESSION, check.EXIT_USAGE, check.EXIT_STALE, check.EXIT_UNPROVEN}
    assert exit_codes(CLI_DOC, "check-server") == serving
    assert exit_codes(CLI_DOC, "bisect") == {*EXIT_CODES.values(), cli.EXIT_USAGE}
    assert exit_codes(CLI_DOC, "diff") == {cli.EXIT_OK, cli.EXIT_FAILED, cli.EXIT_USAGE}
    assert exit_codes(CLI_DOC, "fidelity") == {gate.EXIT_WITHIN, gate.EXIT_OUTSIDE, gate.EXIT_UNPROVEN, cli.EXIT_USAGE}
    assert exit_codes(CLI_DOC, "check-gguf") == {*gate.STATUS_EXIT.values(), gate.EXIT_USAGE}  # the whole gate
    for command in ("show", "report"):
        assert exit_codes(CLI_DOC, command) == {cli.EXIT_OK, cli.EXIT_USAGE}
