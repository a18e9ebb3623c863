"""The real chat model's GGUF tests' helpers: bug copies of a GGUF made with gguf-py's own metadata scripts."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path


def edited(source: Path, tmp_path: Path, script: str, *args: str) -> Path:
    """A copy of `source` edited by gguf-py's script `script` (in place for gguf_set_metadata, else to a new file)."""
    from pytest_genguard.engines.llama_cpp import metadata_script

    out = tmp_path / f"{source.stem}-{script}.gguf"
    if script == "gguf_set_metadata":
        shutil.copyfile(source, out)
        command = [sys.executable, str(metadata_script(script)), str(out), *args, "--force"]
    else:
        command = [sys.executable, str(metadata_script(script)), str(source), str(out), *args, "--force"]
    subprocess.run(command, check=True, capture_output=True)
    return out
