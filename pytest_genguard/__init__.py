"""pytest-genguard: regression tests for what Hugging Face models generate.

The public API is loaded lazily (PEP 562): importing the package, which pytest does in every project where the plugin
is installed, costs no torch or transformers import until a name that needs them is used. The code lives in three
tiers (see CONTRIBUTING.md): `pytest_genguard.core` (standard library only), `pytest_genguard.hf` (torch and
transformers) and `pytest_genguard.plugin` (pytest and syrupy). No public name is also a submodule of this package,
so ``pytest_genguard.record`` is always the function and ``pytest_genguard.hf.record`` the module.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    # torch-free data core
    "GenerationTrace": "core.trace",
    "PromptTrace": "core.trace",
    "Step": "core.trace",
    "ModelFingerprint": "core.trace",
    "TokenizerFingerprint": "core.trace",
    "TraceFormatError": "core.trace",
    "compare": "core.compare",
    "Comparison": "core.comparison",
    "Tolerances": "core.tolerances",
    "Verdict": "core.verdict",
    "tolerances_for": "core.tolerances",
    "EXACT": "core.tolerances",
    "assert_no_repetition": "core.repetition",
    "assert_well_formed": "core.well_formed",
    "Checkpoint": "core.history",
    "RecorderHistory": "core.history",
    "GenguardTrainingWarning": "core.history",
    # torch side
    "tiny_tokenizer": "hf.tiny",
    "tiny_model": "hf.tiny",
    "record": "hf.record",
    "verify": "hf.verify",
    "model_fingerprint": "hf.fingerprint",
    "tokenizer_fingerprint": "hf.fingerprint",
    "GenerationRecorder": "hf.recorder",
    "GenguardCacheWarning": "hf.cache",
    "finetune": "hf.finetune",
    "FineTuned": "hf.finetune",
    "assert_deterministic": "hf.invariants",
    "assert_batch_invariant": "hf.invariants",
    "assert_cache_invariant": "hf.invariants",
    "assert_continuation_consistent": "hf.invariants",
    "assert_processor_contract": "hf.processors",
    # genguard bisect (torch-free: probes run in their own environments)
    "bisect": "bisection.driver",
    "BisectResult": "bisection.driver",
    # hypothesis strategies (a module)
    "strategies": "",
}

__all__ = [
    "EXACT",
    "BisectResult",
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
    "bisect",
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
    """Import the module that defines `name` on first use (PEP 562) and keep the value."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'pytest_genguard' has no attribute {name!r}")
    module = _EXPORTS[name]
    value = (
        importlib.import_module(f"{__name__}.{name}")
        if not module
        else getattr(importlib.import_module(f"{__name__}.{module}"), name)
    )
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:
    from pytest_genguard import strategies as strategies
    from pytest_genguard.bisection.driver import BisectResult, bisect
    from pytest_genguard.core.compare import compare
    from pytest_genguard.core.comparison import Comparison
    from pytest_genguard.core.history import Checkpoint, GenguardTrainingWarning, RecorderHistory
    from pytest_genguard.core.repetition import assert_no_repetition
    from pytest_genguard.core.tolerances import EXACT, Tolerances, tolerances_for
    from pytest_genguard.core.trace import (
        GenerationTrace,
        ModelFingerprint,
        PromptTrace,
        Step,
        TokenizerFingerprint,
        TraceFormatError,
    )
    from pytest_genguard.core.verdict import Verdict
    from pytest_genguard.core.well_formed import assert_well_formed
    from pytest_genguard.hf.cache import GenguardCacheWarning
    from pytest_genguard.hf.finetune import FineTuned, finetune
    from pytest_genguard.hf.fingerprint import model_fingerprint, tokenizer_fingerprint
    from pytest_genguard.hf.invariants import (
        assert_batch_invariant,
        assert_cache_invariant,
        assert_continuation_consistent,
        assert_deterministic,
    )
    from pytest_genguard.hf.processors import assert_processor_contract
    from pytest_genguard.hf.record import record
    from pytest_genguard.hf.recorder import GenerationRecorder
    from pytest_genguard.hf.tiny import tiny_model, tiny_tokenizer
    from pytest_genguard.hf.verify import verify
