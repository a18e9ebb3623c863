"""The composite action for a team's GPU runner (gate/action.yml) is checked like the CPU one: GitHub's schema,
zizmor, every action pinned by commit and every value through `env:`; it installs genguard without torch, runs
`genguard gate --gpu` and uploads the gate's reports also when the gate fails. README's "In CI" names it, and
docs/gate.md's workflow uses it with inputs it has."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
ACTION = ROOT / "gate" / "action.yml"
FULL_SHA = re.compile(r"^[^@\s]+@[0-9a-f]{40}$")


def _tool(name: str) -> str:
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.is_file() else shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed; install the test extra: pip install -e '.[test]'")
    return found


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)


def _load(path: Path) -> dict[Any, Any]:
    yaml = pytest.importorskip("yaml")
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def _high(path: Path) -> list[str]:
    result = _run(_tool("zizmor"), "--offline", "--no-progress", "--format", "json", str(path))
    assert result.returncode not in (1, 2), result.stderr
    return [f["ident"] for f in json.loads(result.stdout) if f["determinations"]["severity"] == "High"]


def test_the_gate_action_matches_the_schema_and_zizmor_finds_nothing_high(tmp_path: Path) -> None:
    result = _run(_tool("check-jsonschema"), "--builtin-schema", "vendor.github-actions", str(ACTION))
    assert result.returncode == 0, result.stdout + result.stderr
    assert _high(ACTION) == []
    # Negative controls: a run step without its shell is refused, an input pasted into the script is found.
    text = ACTION.read_text(encoding="utf-8")
    broken = tmp_path / "broken" / "action.yml"
    broken.parent.mkdir()
    broken.write_text(text.replace("      shell: bash\n", "", 1), encoding="utf-8")
    assert _run(_tool("check-jsonschema"), "--builtin-schema", "vendor.github-actions", str(broken)).returncode != 0
    injected = tmp_path / "injected" / "action.yml"
    injected.parent.mkdir()
    injected.write_text(text.replace('--project "$PROJECT"', "--project ${{ inputs.project }}"), encoding="utf-8")
    assert "template-injection" in _high(injected)


def test_the_gate_action_installs_genguard_without_torch_runs_the_gate_and_always_uploads() -> None:
    data = _load(ACTION)
    steps: list[dict[str, Any]] = data["runs"]["steps"]
    assert all(FULL_SHA.match(step["uses"]) for step in steps if "uses" in step)
    assert not [step for step in steps if "${{" in step.get("run", "")], "values go through env:"
    scripts = [step.get("run", "") for step in steps]
    install = next(i for i, run in enumerate(scripts) if "pip install --no-deps" in run)
    gate = next(i for i, run in enumerate(scripts) if "genguard gate" in run)
    assert "torch" not in scripts[install]
    assert steps[install]["env"]["GENGUARD"] == "${{ github.action_path }}/.."
    assert '--artifacts "$ARTIFACTS"' in scripts[gate] and "gate_args+=(--gpu)" in scripts[gate]
    assert data["inputs"]["gpu"]["default"] == "true"
    (upload,) = [s for s in steps if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert upload["if"] == "${{ !cancelled() }}" and steps.index(upload) > gate > install
    assert upload["with"]["path"] == steps[gate]["env"]["ARTIFACTS"]


def test_readme_names_the_gate_action_and_the_docs_workflow_uses_it_with_inputs_it_has(tmp_path: Path) -> None:
    assert "uses: OWNER/pytest-genguard/gate@COMMIT-SHA" in (ROOT / "README.md").read_text(encoding="utf-8")
    page = (ROOT / "docs" / "gate.md").read_text(encoding="utf-8")
    (workflow,) = [b for b in re.findall(r"^```yaml\n(.*?)^```$", page, re.M | re.S) if "pytest-genguard/gate@" in b]
    path = tmp_path / "decoding-gpu.yml"
    path.write_text(workflow, encoding="utf-8")
    result = _run(_tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    steps = [s for job in _load(path)["jobs"].values() for s in job["steps"]]
    (step,) = [s for s in steps if s.get("uses", "").split("@")[0].endswith("/pytest-genguard/gate")]
    checkout = next(s for s in steps if s.get("uses", "").startswith("actions/checkout@"))
    assert checkout["with"]["persist-credentials"] is False
    unknown = set(step.get("with", {})) - set(_load(ACTION)["inputs"])
    assert not unknown, f"docs/gate.md passes inputs gate/action.yml does not have: {sorted(unknown)}"
