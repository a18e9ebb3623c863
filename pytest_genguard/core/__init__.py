"""The data core: traces, histories, the comparison rule and its explanation, trace-only checks, events, files.

Standard library only (an import-linter contract in pyproject.toml forbids everything else): reading, comparing and
explaining traces must work without torch, transformers or pytest, fast.
"""
