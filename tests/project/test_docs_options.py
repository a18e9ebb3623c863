"""Every command-line option and ini key the pytest plugin registers is documented: in CONTRIBUTING.md's option list
and in the API page's options section. The names are recorded from the plugin's own `pytest_addoption`, called with
a parser that writes down what it is given, so an option added to the plugin without its docs fails here."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, cast

import pytest

from pytest_genguard import plugin

ROOT = Path(__file__).resolve().parents[2]
CONTRIBUTING = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
API = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")


class RecordingParser:
    """Stands in for `pytest.Parser` (and its option groups): keeps the names of the options and ini keys added."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def getgroup(self, name: str, description: str = "") -> RecordingParser:
        return self

    def addoption(self, *names: str, **kwargs: Any) -> None:
        self.names.extend(names)

    def addini(self, name: str, help: str, **kwargs: Any) -> None:
        self.names.append(name)


def registered() -> list[str]:
    """The plugin's options (`--genguard-...`) and ini keys (`genguard_...`), as its `pytest_addoption` adds them."""
    recorder = RecordingParser()
    plugin.pytest_addoption(cast(pytest.Parser, recorder))
    return recorder.names


def section(markdown: str, heading: str) -> str:
    """The text under the `## heading` of a page, up to the next `## `."""
    found = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", markdown, re.M | re.S)
    assert found, f"no '## {heading}' section"
    return found.group(1)


def undocumented(text: str, names: list[str]) -> list[str]:
    """The names that no code span of `text` writes out in full (`--genguard-server URL` names --genguard-server;
    `--genguard-server-model` does not)."""
    code = " ".join(re.findall(r"`([^`]+)`", text))
    return [name for name in names if not re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", code)]


def test_the_recording_parser_sees_the_plugins_options_and_ini_keys() -> None:
    names = registered()
    assert {"--genguard-gpu", "--genguard-server", "--genguard-server-model", "genguard_lse_ulps"} <= set(names)
    assert all(name.startswith(("--genguard-", "genguard_")) for name in names), names


def test_contributing_lists_every_option_and_ini_key_of_the_plugin() -> None:
    missing = undocumented(section(CONTRIBUTING, "Shared state, options"), registered())
    assert not missing, f"CONTRIBUTING.md's option list ('Shared state, options') lacks {missing}"


def test_the_api_page_documents_every_option_and_ini_key_of_the_plugin() -> None:
    missing = undocumented(section(API, "Options, ini keys and markers"), registered())
    assert not missing, f"docs/api.md's 'Options, ini keys and markers' lacks {missing}"


def test_the_option_check_fails_on_a_removed_line() -> None:
    # Negative control: the API page's options section without the line of the server options, and a name that is
    # only the prefix of a documented one.
    text = section(API, "Options, ini keys and markers")
    without = "\n".join(line for line in text.splitlines() if "`--genguard-server URL`" not in line)
    assert undocumented(without, registered()) == ["--genguard-server", "--genguard-server-model"]
    without = "\n".join(line for line in text.splitlines() if "`--genguard-gguf FILE`" not in line)
    gguf = ["--genguard-gguf", "--genguard-gguf-kv-cache", "--genguard-gguf-model", "--genguard-gguf-no-probe"]
    gguf.append("--genguard-gguf-baseline")
    assert undocumented(without, registered()) == gguf
    assert undocumented("`--genguard-server-model NAME`", ["--genguard-server"]) == ["--genguard-server"]
