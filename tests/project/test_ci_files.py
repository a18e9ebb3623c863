"""The CI workflows, the composite action (action.yml), .ci/'s scripts and the CUDA Dockerfile are checked like code.

Each linter runs on the committed files (check-jsonschema, zizmor, hadolint, shellcheck, all in the ``test``
extra); the rules they do not know about (SHA pins, no expressions in shell scripts, the gate's
command line, a non-root user, deterministic cuBLAS) are asserted here directly.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import dockerfile
import pytest
from readme_blocks import section as readme_section

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"
CI = WORKFLOWS / "ci.yml"
GPU = WORKFLOWS / "gpu.yml"
UPSTREAM = WORKFLOWS / "upstream.yml"
DOCKERFILE = ROOT / "Dockerfile.cuda"
DOCKERIGNORE = ROOT / ".dockerignore"
CI_RUN = ROOT / ".ci" / "run"
# The bash scripts of .ci/ (the Python helpers beside them are checked by ruff).
CI_SCRIPTS = sorted(p for p in (ROOT / ".ci").iterdir() if p.read_bytes().startswith(b"#!/usr/bin/env bash"))
ACTION = ROOT / "action.yml"

FULL_SHA = re.compile(r"^[^@\s]+@[0-9a-f]{40}$")
PIPEFAIL = re.compile(r"^\s*set\s+-[a-z]*o\s+pipefail\b", re.M)
# A pipe into a reader that can stop before the writer is done: grep -q/-m exits at its first match, head after N lines.
EARLY_READER = re.compile(r"(?<!\|)\|(?!\|)\s*(grep\s+(-[a-zA-Z]*[qm]|--quiet|--silent|--max-count)|head\b)")
TIMEOUT_S = 120


def _tool(name: str) -> str:
    """Path of a linter's executable, preferring the running interpreter's environment."""
    beside_python = Path(sys.executable).parent / name
    if beside_python.is_file():
        return str(beside_python)
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed; install the test extra: pip install -e '.[test]'")
    return found


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


def _load(path: Path) -> dict[Any, Any]:
    yaml = pytest.importorskip("yaml")
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict), f"{path.name} is not a YAML mapping"
    return data


def _steps(workflow: dict[Any, Any]) -> list[dict[str, Any]]:
    return [step for job in workflow["jobs"].values() for step in job.get("steps", [])]


def _scripts(job: dict[str, Any]) -> str:
    """A job's `run:` scripts, as one text."""
    return "\n".join(step["run"] for step in job["steps"] if "run" in step)


def _triggers(workflow: dict[Any, Any]) -> dict[str, Any]:
    trigger: dict[str, Any] = workflow["on"] if "on" in workflow else workflow[True]  # YAML 1.1 reads `on` as True
    return trigger


@pytest.mark.parametrize("workflow", [CI, GPU, UPSTREAM], ids=lambda p: p.name)
def test_workflow_matches_the_github_workflow_schema(workflow: Path) -> None:
    result = _run(
        _tool("check-jsonschema"),
        "--builtin-schema",
        "vendor.github-workflows",
        str(workflow),
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _zizmor_high(*paths: Path) -> list[str]:
    """zizmor's high-severity findings in the workflows or actions at `paths`."""
    result = _run(_tool("zizmor"), "--offline", "--no-progress", "--format", "json", *map(str, paths))
    # zizmor exits non-zero whenever it has findings; 1 and 2 are its own failures (bad input).
    assert result.returncode not in (1, 2), result.stderr
    findings = json.loads(result.stdout)
    return [
        f"{finding['ident']}: {finding['desc']}"
        for finding in findings
        if finding["determinations"]["severity"] == "High"
    ]


def test_zizmor_finds_no_high_severity_issue_in_the_workflows_and_the_action() -> None:
    high = _zizmor_high(WORKFLOWS, ACTION)
    assert not high, "zizmor high-severity findings:\n" + "\n".join(high)


def test_hadolint_passes_the_cuda_dockerfile_without_warnings() -> None:
    result = _run(_tool("hadolint"), "--no-color", str(DOCKERFILE))
    report = result.stdout + result.stderr
    assert result.returncode == 0, report
    assert not result.stdout.strip(), report


@pytest.mark.parametrize("workflow", [CI, GPU, UPSTREAM], ids=lambda p: p.name)
def test_every_action_is_pinned_to_a_full_commit_sha(workflow: Path) -> None:
    data = _load(workflow)
    uses = [step["uses"] for step in _steps(data) if "uses" in step]
    uses += [job["uses"] for job in data["jobs"].values() if "uses" in job]
    assert uses, f"{workflow.name} uses no actions at all"
    unpinned = [ref for ref in uses if not FULL_SHA.match(ref)]
    assert not unpinned, f"pin these to a 40-character commit SHA in {workflow.name}: {unpinned}"


@pytest.mark.parametrize("workflow", [CI, GPU, UPSTREAM], ids=lambda p: p.name)
def test_shell_steps_take_no_template_expressions(workflow: Path) -> None:
    # An expression in `run:` is pasted into the script before the shell sees it: pass values
    # through `env:` and quote the variable instead.
    scripts = [step["run"] for step in _steps(_load(workflow)) if "run" in step]
    expanded = [script for script in scripts if "${{" in script]
    assert not expanded, f"{workflow.name} expands expressions inside run: {expanded}"


@pytest.mark.parametrize("workflow", [CI, GPU, UPSTREAM], ids=lambda p: p.name)
def test_workflow_reads_only_and_does_not_persist_credentials(workflow: Path) -> None:
    data = _load(workflow)
    assert data.get("permissions") == {"contents": "read"}
    checkouts = [s for s in _steps(data) if s.get("uses", "").startswith("actions/checkout@")]
    assert checkouts, f"{workflow.name} never checks out the repository"
    for step in checkouts:
        assert step.get("with", {}).get("persist-credentials") is False


def test_cpu_ci_lints_types_and_tests_every_supported_python_on_cpu_torch() -> None:
    data = _load(CI)
    (job,) = data["jobs"].values()
    assert job["strategy"]["matrix"]["python-version"] == ["3.11", "3.12", "3.13"]
    scripts = _scripts(job)
    for command in (
        "--index-url https://download.pytorch.org/whl/cpu",
        'pip install -e ".[test]"',
        "ruff check .",
        "ruff format --check .",
        "mypy pytest_genguard",
        "pytest -n 2",
    ):
        assert command in scripts, f"ci.yml does not run {command!r}"
    assert scripts.index("whl/cpu") < scripts.index('".[test]"'), "CPU torch must come first"


def test_upstream_job_runs_the_suite_weekly_on_transformers_pre_releases_and_main_and_torch_nightly() -> None:
    data = _load(UPSTREAM)
    triggers = _triggers(data)
    assert set(triggers) == {"schedule", "workflow_dispatch"} and triggers["schedule"][0]["cron"]
    (job,) = data["jobs"].values()
    combos = {(c["transformers"], c["torch"]) for c in job["strategy"]["matrix"]["include"]}
    assert combos == {("pre-release", "release"), ("main", "release"), ("release", "nightly")}
    scripts = _scripts(job)
    for command in (
        "--pre torch --index-url https://download.pytorch.org/whl/nightly/cpu",
        "pip install --upgrade --pre transformers",
        "git+https://github.com/huggingface/transformers",
        "pytest tests/hf/test_negative_controls.py",
        "pytest -n 2",
    ):
        assert command in scripts, f"upstream.yml does not run {command!r}"
    assert scripts.index("whl/nightly/cpu") < scripts.index('".[test]"'), "CPU torch must come first"


def test_gpu_gate_runs_genguard_gate_on_a_gpu_runner_and_always_uploads_the_report() -> None:
    data = _load(GPU)
    triggers = _triggers(data)
    assert {"push", "pull_request", "workflow_dispatch"} <= set(triggers)
    (job,) = data["jobs"].values()
    assert job["runs-on"] == ["self-hosted", "linux", "gpu"]
    scripts = _scripts(job)
    assert "pip install --no-deps . filelock platformdirs" in scripts  # no torch on the runner
    assert "genguard gate --gpu" in scripts and "--artifacts artifacts" in scripts
    (upload,) = [s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert upload["if"] == "always()"
    assert upload["with"]["path"].rstrip("/") == "artifacts"


def test_cuda_dockerfile_runs_the_gpu_suite_as_a_non_root_user_with_deterministic_cublas() -> None:
    parsed = dockerfile.instructions()
    (base,) = [args for name, args in parsed if name == "FROM"]
    assert base == "${BASE_IMAGE}", base  # another base is a build argument (.ci/cuda-gate builds on its own)
    default = dockerfile.arg_defaults()["BASE_IMAGE"]
    assert default and re.fullmatch(r"pytorch/pytorch:[\w.-]+-cuda[\w.-]+@sha256:[0-9a-f]{64}", default), default
    # BuildKit would pull the `# syntax=` frontend image from Docker Hub: nothing in the file needs it.
    assert not DOCKERFILE.read_text(encoding="utf-8").startswith("# syntax=")

    env = " ".join(args for name, args in parsed if name == "ENV")
    assert "CUBLAS_WORKSPACE_CONFIG=:4096:8" in env
    assert "PYTHONHASHSEED=0" in env

    users = [args for name, args in parsed if name == "USER"]
    assert users, "Dockerfile.cuda never leaves root"
    assert users[-1].split(":")[0] not in {"root", "0"}

    argv = dockerfile.cmd()
    assert argv[0] == "pytest"
    assert "--genguard-gpu" in argv

    run = " ".join(args for name, args in parsed if name == "RUN")
    assert "pip install --no-cache-dir" in run
    import tomllib

    gate = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["genguard"]["gate"]
    assert "test" in gate["extras"]
    # The base's torch pinned by its distribution's version: torch.__version__ of PyPI's CUDA build (2.13.0+cu130) is
    # no version pip can satisfy.
    assert "m.version('torch')" in run and "torch.__version__" not in run.split("pip install")[0]


def test_the_dependencies_are_installed_before_the_source_is_copied() -> None:
    # A source change must not reinstall the dependencies: their layer is keyed by what genguard gate resolved from
    # the files that declare them (pinned, cached by those files).
    parsed = dockerfile.instructions()
    copies = [(i, args) for i, (name, args) in enumerate(parsed) if name == "COPY"]
    (source,) = [i for i, args in copies if args.split()[-2:] == ["project/", "/workspace/"]]
    assert source == max(i for i, _ in copies), "the source is the last thing copied"
    dependencies = [i for i, (name, args) in enumerate(parsed) if name == "RUN" and "--requirement" in args]
    assert dependencies and max(dependencies) < source
    earlier = [args for i, args in copies if i < source]
    assert earlier[:2] == [
        "genguard-gate/requirements.txt genguard-gate/no-deps.txt /tmp/genguard-gate/",
        "genguard-gate/wheels /tmp/genguard-gate/wheels",
    ], earlier
    # Then the package alone (the real chat model's folder is built from it), not the tests or the examples.
    assert [args.split()[1:] for args in earlier[2:]] == [
        ["project/pyproject.toml", "project/README.md", "/workspace/"],
        ["project/pytest_genguard", "/workspace/pytest_genguard"],
    ], earlier


def test_docker_build_context_leaves_out_local_state() -> None:
    ignored = set(DOCKERIGNORE.read_text(encoding="utf-8").split())
    assert {".git", ".venv", "artifacts"} <= ignored


def early_exit_pipes(script: str) -> list[str]:
    """The lines of a bash `script` under `set -o pipefail` that pipe into a reader that may exit early: the writer then
    dies of a broken pipe now and then, and the pipeline fails at random (.ci/run skipped kernel-set legs so)."""
    if not PIPEFAIL.search(script):
        return []
    lines = (line.strip() for line in script.splitlines())
    return [line for line in lines if not line.startswith("#") and EARLY_READER.search(line)]


def _ci_function(name: str) -> str:
    """The text of a bash function of .ci/run (from `name() {` to its closing brace at the line start)."""
    found = re.search(rf"^{name}\(\) \{{.*?^\}}$", CI_RUN.read_text(encoding="utf-8"), re.M | re.S)
    assert found, f".ci/run defines no {name}()"
    return found.group(0)


@pytest.mark.parametrize("script", CI_SCRIPTS, ids=lambda p: p.name)
def test_ci_scripts_pipe_into_no_reader_that_exits_early(script: Path) -> None:
    found = early_exit_pipes(script.read_text(encoding="utf-8"))
    assert not found, f".ci/{script.name} runs under pipefail: capture the output first, then test it: {found}"


def test_ci_scripts_are_executable_bash_under_strict_mode_and_pass_shellcheck() -> None:
    assert {".ci/run", ".ci/cuda-gate", ".ci/llama-cpp-wheel", ".ci/vllm-venv"} <= {f".ci/{p.name}" for p in CI_SCRIPTS}
    for script in CI_SCRIPTS:
        assert os.access(script, os.X_OK), f".ci/{script.name} is not executable (git update-index --chmod=+x)"
        assert re.search(r"^set -euo pipefail$", script.read_text(encoding="utf-8"), re.M), f".ci/{script.name}"
    result = _run(_tool("shellcheck"), "--norc", *map(str, CI_SCRIPTS))
    assert result.returncode == 0, result.stdout + result.stderr


def test_shellcheck_finds_an_unquoted_expansion(tmp_path: Path) -> None:
    # Negative control of the check above: ShellCheck reads the scripts and fails on what it should.
    bad = tmp_path / "bad"
    bad.write_text("#!/usr/bin/env bash\nset -euo pipefail\nrm -rf $1/cache\n", encoding="utf-8")
    result = _run(_tool("shellcheck"), "--norc", str(bad))
    assert result.returncode != 0 and "SC2086" in result.stdout


def test_the_early_exit_check_finds_the_kernel_set_pipe_that_skipped_legs() -> None:
    # Negative control: the line that skipped legs at random, in a script under pipefail, is found; without pipefail a
    # pipeline's status is its last command's, and the same line is harmless.
    bad = '  if ! "$PY" tests/support/kernel_sets.py | grep -qx "$kernels"; then'
    assert early_exit_pipes(f"set -euo pipefail\n{bad}\n") == [bad.strip()]
    assert early_exit_pipes(f"set -eu\n{bad}\n") == []
    assert early_exit_pipes('set -euo pipefail\ngrep -q x <<<"$out" || grep -qx y <<<"$out"\n# | grep -q\n') == []


@pytest.mark.parametrize(
    ("tests", "passed"),
    [("def test_a(): pass\ndef test_b(): pass\n", 2), ("import pytest\n@pytest.mark.skip\ndef test_a(): pass\n", 0)],
    ids=["two-pass", "all-skipped"],
)
def test_a_kernel_set_leg_counts_the_tests_pytest_says_passed(tmp_path: Path, tests: str, passed: int) -> None:
    # The kernel-set legs fail when no test passed: .ci/run's passed_in() reads the count from pytest's real summary.
    (tmp_path / "test_leg.py").write_text(tests, encoding="utf-8")
    log = tmp_path / "log"
    pytest_run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path / "test_leg.py")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    log.write_text(pytest_run.stdout, encoding="utf-8")
    counted = _run("bash", "-c", f'{_ci_function("passed_in")}\npassed_in "$1"', "bash", str(log))
    assert counted.returncode == 0, counted.stderr
    assert counted.stdout.strip() == str(passed), pytest_run.stdout


def _action_steps() -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = _load(ACTION)["runs"]["steps"]
    return steps


def test_the_action_matches_the_github_action_schema(tmp_path: Path) -> None:
    result = _run(_tool("check-jsonschema"), "--builtin-schema", "vendor.github-actions", str(ACTION))
    assert result.returncode == 0, result.stdout + result.stderr
    # Negative control: a composite action's run step without its `shell:` is refused.
    broken = tmp_path / "action.yml"
    broken.write_text(ACTION.read_text(encoding="utf-8").replace("      shell: bash\n", "", 1), encoding="utf-8")
    refused = _run(_tool("check-jsonschema"), "--builtin-schema", "vendor.github-actions", str(broken))
    assert refused.returncode != 0


def test_zizmor_reads_the_action_an_expression_in_its_script_is_a_finding(tmp_path: Path) -> None:
    # Negative control of the zizmor test above: it audits the action, and an input pasted into a script is found.
    text = ACTION.read_text(encoding="utf-8")
    injected = text.replace('python -m pytest "$TEST_PATH"', "python -m pytest ${{ inputs.test-path }}")
    assert injected != text
    (tmp_path / "action.yml").write_text(injected, encoding="utf-8")
    assert any(finding.startswith("template-injection") for finding in _zizmor_high(tmp_path / "action.yml"))


def test_every_step_of_the_action_is_pinned_and_takes_its_values_through_env() -> None:
    steps = _action_steps()
    uses = [step["uses"] for step in steps if "uses" in step]
    assert uses, "action.yml uses no actions at all"
    unpinned = [ref for ref in uses if not FULL_SHA.match(ref)]
    assert not unpinned, f"pin these to a 40-character commit SHA in action.yml: {unpinned}"
    expanded = [step["run"] for step in steps if "${{" in step.get("run", "")]
    assert not expanded, f"action.yml expands expressions inside run: {expanded}"


def test_the_action_installs_cpu_torch_then_genguard_from_its_checkout_and_uploads_the_report() -> None:
    data = _load(ACTION)
    assert data["runs"]["using"] == "composite"
    assert data["inputs"]["torch-index-url"]["default"] == "https://download.pytorch.org/whl/cpu"
    assert {"test-path", "python-version", "torch", "torch-index-url", "report-name"} <= set(data["inputs"])
    steps = _action_steps()
    scripts = [step.get("run", "") for step in steps]
    torch_step = next(i for i, run in enumerate(scripts) if '--index-url "$TORCH_INDEX_URL"' in run)
    genguard_step = next(i for i, run in enumerate(scripts) if 'pip install "$GENGUARD"' in run)
    test_step = next(i for i, run in enumerate(scripts) if "python -m pytest" in run)
    assert torch_step < genguard_step < test_step, "CPU torch first, then genguard, then the tests"
    assert steps[genguard_step]["env"]["GENGUARD"] == "${{ github.action_path }}"
    assert '"$TEST_PATH"' in scripts[test_step] and '--genguard-report "$REPORT"' in scripts[test_step]
    assert steps[test_step]["env"]["TEST_PATH"] == "${{ inputs.test-path }}"
    (upload,) = [s for s in steps if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert upload["with"]["path"] == steps[test_step]["env"]["REPORT"], "the report the tests write is uploaded"
    assert upload["with"]["name"] == "${{ inputs.report-name }}"
    assert upload["if"] == "${{ !cancelled() }}", "the report matters most when the tests failed"
    assert steps.index(upload) > test_step


def test_the_readme_uses_the_action_with_inputs_it_has(tmp_path: Path) -> None:
    language, workflow = readme_section("action")
    assert language == "yaml"
    path = tmp_path / "generation.yml"
    path.write_text(workflow, encoding="utf-8")
    result = _run(_tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    (step,) = [s for s in _steps(_load(path)) if s.get("uses", "").split("@")[0].endswith("/pytest-genguard")]
    unknown = set(step.get("with", {})) - set(_load(ACTION)["inputs"])
    assert not unknown, f"README passes inputs action.yml does not have: {sorted(unknown)}"
