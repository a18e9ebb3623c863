"""What a vLLM server's start costs on the CPU, with vLLM's AOT compile cache (its default on torch 2.10 and newer)
against its other compile cache (``VLLM_USE_AOT_COMPILE=0``: inductor's own, which `vllm_server.launch` keeps beside
the vLLM virtualenv): vLLM 0.32 saves the AOT cache but fails to load it on the CPU ("'function' object has no
attribute 'finalize_loading'"), so each start compiles the model again.

Needs vLLM's virtualenv (``.ci/vllm-venv``), so it is not one of `python -m benchmarks`' figures:

    OMP_NUM_THREADS=1 PYTHONPATH=.:tests/support python benchmarks/vllm_start.py [MODEL_FOLDER] [--pairs 2]

MODEL_FOLDER defaults to the tiny llama the server tests serve (copied to a path keyed by its bytes, as they serve
it). Each start is timed until ``/health`` answers, in alternating pairs after one start of each (which fills the
caches), and the per-pair ratio reported, as every figure here.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable from the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import served_model
import vllm_server

from benchmarks.harness import alternate, loadavg, machine, secs


def _start(folder: Path, logs: Path, aot: bool) -> None:
    server = vllm_server.launch(
        folder, logs, name="aot" if aot else "other", environment={"VLLM_USE_AOT_COMPILE": "1" if aot else "0"}
    )
    try:
        vllm_server.wait(server)
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(prog="benchmarks/vllm_start.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", nargs="?", type=Path, help="a model folder (default: the server tests' tiny llama)")
    parser.add_argument("--pairs", type=int, default=2)
    args = parser.parse_args()
    folder = args.folder or vllm_server.stable_folder(served_model.MODEL_DIR)
    logs = Path(tempfile.mkdtemp(prefix="genguard-vllm-start-"))
    paired = alternate(lambda: _start(folder, logs, True), lambda: _start(folder, logs, False), args.pairs)
    lines = [
        f"vLLM start ({folder}; {args.pairs} alternating pairs after one start of each; logs in {logs}):",
        f"- AOT compile cache (vLLM's default): {paired.a.text('{:.3g}', ' s')} (min / median / max)",
        f"- VLLM_USE_AOT_COMPILE=0: {paired.b.text('{:.3g}', ' s')}",
        f"- ratio: {paired.ratios.text('{:.3g}', '×')}; median {secs(paired.a.median)} vs {secs(paired.b.median)}",
        f"- load average {loadavg()}",
        *machine(),
    ]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
