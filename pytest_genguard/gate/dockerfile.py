"""The gate's Dockerfile: one template (`pytest_genguard/data/gate.Dockerfile`) rendered for a project. genguard's own
`Dockerfile.cuda` is what it renders for genguard's project (a test holds the two byte-equal), and
`genguard gate --dockerfile` prints it for the project it runs in, so a team can keep and change its own copy.

The template holds everything a project shares (the base, the determinism environment, the non-root user, the
dependency layers, the torch constraint); the project gives its name, its layers (what makes up its package, a
`prepare` command) and its selection. What goes into the build context besides the project is named here too
(`CONTEXT_DIR`, beside the project's `PROJECT_DIR`: the project's last COPY takes the project alone), so the template
and the context writer cannot disagree.
"""

from __future__ import annotations

import json
import re
from importlib import resources

from pytest_genguard.gate.project import Project

__all__ = [
    "ARTIFACTS",
    "CONTEXT_DIR",
    "DEFAULT_BASE",
    "GPU_FLAG",
    "JUNIT",
    "PROJECT_DIR",
    "REPORT",
    "cpu_command",
    "gate_command",
    "render",
]

DEFAULT_BASE = (
    "pytorch/pytorch:2.13.0-cuda12.6-cudnn9-runtime"
    "@sha256:6acf597eeb8e376a96580dde4952f37cc017fef732bb40bfc73f28f25e3f64b4"
)
CONTEXT_DIR = "genguard-gate"
"""The folder of the context genguard gate writes: Dockerfile, requirements.txt, no-deps.txt, wheels/, genguard/."""
PROJECT_DIR = "project"
"""The folder of the build context that holds the project: `COPY project/ /workspace/` copies it alone."""
ARTIFACTS = "/artifacts"
REPORT = f"{ARTIFACTS}/genguard-report.html"
JUNIT = f"{ARTIFACTS}/junit.xml"
GPU_FLAG = "--genguard-gpu"
_WIDTH = 120
_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")
_OWNER = "--chown=genguard:genguard"

_GENGUARD_LAYER = f"""
# The genguard that ran `genguard gate` (a wheel of its own files; genguard is not on the package index), without its
# dependencies: they are among the requirements above.
COPY {CONTEXT_DIR}/genguard /tmp/genguard-gate/genguard
RUN python -m pip install --no-cache-dir --quiet --no-deps /tmp/genguard-gate/genguard/*.whl
"""
_INSTALL = """RUN python -m pip install --no-cache-dir --quiet --no-deps --editable . \\
    && python -c "import torch, pytest_genguard; print('torch', torch.__version__, 'CUDA', torch.version.cuda)"
"""
_USER = """
# Numeric, so runtimes that enforce runAsNonRoot can check it without reading /etc/passwd.
USER 10001:10001
ENV HOME=/home/genguard \\
    HF_HOME=/home/genguard/.cache/huggingface
"""


def gate_command(project: Project) -> list[str]:
    """The image's command: the project's selection on the GPU, the report and the JUnit XML into /artifacts."""
    return [
        "pytest",
        *project.args,
        GPU_FLAG,
        "-p",
        "no:cacheprovider",
        "-ra",
        "--genguard-report",
        REPORT,
        "--junitxml",
        JUNIT,
    ]


def cpu_command(command: list[str]) -> list[str]:
    """The image's command (the GPU gate) on the CPU: the same minus `--genguard-gpu`; refused when it is not the GPU
    gate (a command without the flag, or with it twice, is not one genguard gate wrote)."""
    if command.count(GPU_FLAG) != 1:
        raise ValueError(f"the image's command must hold {GPU_FLAG} exactly once (it is the GPU gate): {command}")
    return [arg for arg in command if arg != GPU_FLAG]


def _cmd_line(argv: list[str]) -> str:
    """`CMD [...]` in exec form, wrapped at the house's line length with continuation lines."""
    words = [json.dumps(arg) for arg in argv]
    lines: list[str] = []
    line = "CMD ["
    for i, word in enumerate(words):
        piece = word + ("]" if i == len(words) - 1 else ",")
        if len(line) + len(piece) + 3 > _WIDTH and not line.endswith("["):
            lines.append(line + " \\")
            line = "    "
        line += piece if line.endswith(("[", "    ")) else " " + piece
    lines.append(line)
    return "\n".join(lines)


def _package_layers(project: Project) -> str:
    if not project.installable:
        return (
            "\n# The project's files (a folder of tests: no [project] table to install).\n"
            f"COPY {_OWNER} {PROJECT_DIR}/ /workspace/\n" + _USER
        )
    if project.install == (".",):
        text = (
            "\n# The project, installed editable without its dependencies (above): a source change rebuilds here.\n"
            f"COPY {_OWNER} {PROJECT_DIR}/ /workspace/\n" + _INSTALL + _USER
        )
        if project.prepare:
            text += f"# [tool.genguard.gate] prepare, as the user the gate runs as.\nRUN {project.prepare}\n"
        return text
    files = [p for p in project.install if not (project.root / p).is_dir()]
    folders = [p for p in project.install if (project.root / p).is_dir()]
    text = (
        "\n# The package alone, installed editable without its dependencies (above): a change to the tests or the\n"
        f"# docs reuses these layers. [tool.genguard.gate] install: {', '.join(project.install)}\n"
    )
    if files:
        text += f"COPY {_OWNER} {' '.join(f'{PROJECT_DIR}/{f}' for f in files)} /workspace/\n"
    text += "".join(f"COPY {_OWNER} {PROJECT_DIR}/{folder} /workspace/{folder.rstrip('/')}\n" for folder in folders)
    text += _INSTALL + _USER
    if project.prepare:
        text += (
            "# [tool.genguard.gate] prepare, as the user the gate runs as, in a layer keyed by the package: the gate\n"
            f"# does not pay it on every run.\nRUN {project.prepare}\n"
        )
    text += (
        "\n# The rest of the source last (tests, their snapshots, model folders): a change there rebuilds this layer "
        f"only.\nCOPY {_OWNER} {PROJECT_DIR}/ /workspace/\n"
    )
    return text


def render(project: Project, base_image: str = DEFAULT_BASE) -> str:
    """The gate's Dockerfile for `project`."""
    template = resources.files("pytest_genguard").joinpath("data/gate.Dockerfile").read_text(encoding="utf-8")
    values = {
        "project": project.name or project.root.name,
        "base_image": base_image,
        "genguard_layer": "" if project.is_genguard else _GENGUARD_LAYER,
        "package_layer": _package_layers(project),
        "cmd": _cmd_line(gate_command(project)),
    }
    text = template
    for key in ("genguard_layer", "package_layer"):  # whole lines: an empty layer leaves no blank line behind
        text = text.replace("{{" + key + "}}\n", values.pop(key))
    text = _PLACEHOLDER.sub(lambda found: values[found.group(1)], text)
    return text
