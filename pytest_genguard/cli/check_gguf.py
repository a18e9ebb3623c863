"""`genguard check-gguf GGUF SNAPSHOT...`: a GGUF file judged against snapshots through llama.cpp. The work is on the
torch side, `pytest_genguard.engines.gguf_command` (its `run()` loads torch and llama-cpp-python; importing it, which
the parser needs for the arguments, loads neither): this module names it among the subcommands."""

from __future__ import annotations

from pytest_genguard.engines.gguf_command import add_arguments, run

__all__ = ["add_arguments", "run"]
