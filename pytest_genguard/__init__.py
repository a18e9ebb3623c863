"""pytest-genguard: regression tests for what Hugging Face models generate.

The public API is loaded lazily (PEP 562): importing the package, which pytest does in every project where the plugin
is installed, costs no torch or transformers import until a name that needs them is used.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    # torch-free data core
    "GenerationTrace": "trace",
    "PromptTrace": "trace",
    "Step": "trace",
    "ModelFingerprint": "trace",
    "TokenizerFingerprint": "trace",
    "TraceFormatError": "trace",
    "compare": "compare",
    "Comparison": "compare",
    "Tolerances": "compare",
    "Verdict": "compare",
    "tolerances_for": "compare",
    "EXACT": "compare",
    "assert_no_repetition": "repetition",
    "assert_well_formed": "repetition",
    "Checkpoint": "history",
    "RecorderHistory": "history",
    "GenguardTrainingWarning": "history",
    # torch side
    "tiny_tokenizer": "tiny",
    "tiny_model": "tiny",
    "record": "record",
    "verify": "verify",
    "model_fingerprint": "fingerprint",
    "tokenizer_fingerprint": "fingerprint",
    "GenerationRecorder": "recorder",
    "GenguardCacheWarning": "cache",
    "finetune": "finetune",
    "FineTuned": "finetune",
    "assert_deterministic": "invariants",
    "assert_batch_invariant": "invariants",
    "assert_cache_invariant": "invariants",
    "assert_continuation_consistent": "invariants",
    "assert_processor_contract": "processors",
}

__all__ = [
    "EXACT",
    "Checkpoint",
    "Comparison",
    "FineTuned",
    "GenerationRecorder",
    "GenerationTrace",
    "GenguardCacheWarning",
    "GenguardTrainingWarning",
    "ModelFingerprint",
    "PromptTrace",
    "RecorderHistory",
    "Step",
    "TokenizerFingerprint",
    "Tolerances",
    "TraceFormatError",
    "Verdict",
    "__version__",
    "assert_batch_invariant",
    "assert_cache_invariant",
    "assert_continuation_consistent",
    "assert_deterministic",
    "assert_no_repetition",
    "assert_processor_contract",
    "assert_well_formed",
    "compare",
    "finetune",
    "model_fingerprint",
    "record",
    "strategies",
    "tiny_model",
    "tiny_tokenizer",
    "tokenizer_fingerprint",
    "tolerances_for",
    "verify",
]


def __getattr__(name: str) -> Any:
    if name == "strategies":
        return importlib.import_module("pytest_genguard.strategies")
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_genguard' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"pytest_genguard.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


class _PublicAPI(types.ModuleType):
    """Keeps `pytest_genguard.record`, `.verify`, `.compare`, ... the functions: importing the submodule of the same
    name (``from pytest_genguard.verify import ...``) would otherwise set the attribute to the module."""

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, types.ModuleType) and _EXPORTS.get(name) == name:
            return  # the submodule stays in sys.modules; the attribute comes from __getattr__
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _PublicAPI


if TYPE_CHECKING:
    from pytest_genguard import strategies as strategies
    from pytest_genguard.cache import GenguardCacheWarning
    from pytest_genguard.compare import EXACT, Comparison, Tolerances, Verdict, compare, tolerances_for
    from pytest_genguard.finetune import FineTuned, finetune
    from pytest_genguard.fingerprint import model_fingerprint, tokenizer_fingerprint
    from pytest_genguard.history import Checkpoint, GenguardTrainingWarning, RecorderHistory
    from pytest_genguard.invariants import (
        assert_batch_invariant,
        assert_cache_invariant,
        assert_continuation_consistent,
        assert_deterministic,
    )
    from pytest_genguard.processors import assert_processor_contract
    from pytest_genguard.record import record
    from pytest_genguard.recorder import GenerationRecorder
    from pytest_genguard.repetition import assert_no_repetition, assert_well_formed
    from pytest_genguard.tiny import tiny_model, tiny_tokenizer
    from pytest_genguard.trace import (
        GenerationTrace,
        ModelFingerprint,
        PromptTrace,
        Step,
        TokenizerFingerprint,
        TraceFormatError,
    )
    from pytest_genguard.verify import verify
