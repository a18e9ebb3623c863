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
    # The one list of the public API: each name and the module (under this package) that defines it. `__all__` is
    # derived from it; the `TYPE_CHECKING` imports below repeat it for type checkers, which cannot read a dict, and
    # tests/plugin/test_import_cost.py fails when the two disagree. Adding a name: one line here, one import there.
    # torch-free data core
    "GenerationTrace": "core.trace",
    "PromptTrace": "core.trace",
    "Step": "core.trace",
    "ModelFingerprint": "core.trace",
    "TokenizerFingerprint": "core.trace",
    "compare": "core.compare",
    "Fingerprints": "core.compare",
    "Comparison": "core.comparison",
    "Tolerances": "core.tolerances",
    "Verdict": "core.verdict",
    "tolerances_for": "core.tolerances",
    "EXACT": "core.tolerances",
    "assert_no_repetition": "core.repetition",
    "assert_well_formed": "core.well_formed",
    "Budget": "core.budget",
    "FidelityReport": "core.budget",
    "Checkpoint": "core.history",
    "RecorderHistory": "core.history",
    # every warning and error genguard raises for its users (one base each: GenguardWarning, GenguardError)
    "GenguardWarning": "core.errors",
    "GenguardTrainingWarning": "core.errors",
    "GenguardCacheWarning": "core.errors",
    "GenguardPinWarning": "core.errors",
    "VerifyFallbackWarning": "core.errors",
    "GenguardError": "core.errors",
    "TraceFormatError": "core.errors",
    "PinError": "core.errors",
    "CacheFolderError": "core.errors",
    "EngineUnavailable": "core.errors",
    "BisectError": "core.errors",
    "ReleaseError": "core.errors",
    "InstallError": "core.errors",
    "ModelUnavailable": "core.errors",
    "ServerError": "core.errors",
    "ServerStale": "core.errors",
    "KernelSetUnsupported": "core.errors",
    # torch side
    "tiny_tokenizer": "hf.tiny",
    "tiny_model": "hf.tiny",
    "record": "hf.record",
    "verify": "hf.verify",
    "fidelity": "hf.fidelity",
    "calibrate": "hf.fidelity",
    "load_smollm2": "hf.smollm2",
    "smollm2_folder": "hf.smollm2",
    "load_gemma3": "hf.gemma3",
    "gemma3_folder": "hf.gemma3",
    "gemma3_gguf": "hf.gemma3",
    "model_fingerprint": "hf.fingerprint",
    "tokenizer_fingerprint": "hf.tokenizer_hash",
    "GenerationRecorder": "hf.recorder",
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

__all__ = sorted([*_EXPORTS, "__version__"])


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
    from pytest_genguard.bisection.driver import BisectResult as BisectResult, bisect as bisect
    from pytest_genguard.core.budget import Budget as Budget, FidelityReport as FidelityReport
    from pytest_genguard.core.compare import Fingerprints as Fingerprints, compare as compare
    from pytest_genguard.core.comparison import Comparison as Comparison
    from pytest_genguard.core.errors import (
        BisectError as BisectError,
        CacheFolderError as CacheFolderError,
        EngineUnavailable as EngineUnavailable,
        GenguardCacheWarning as GenguardCacheWarning,
        GenguardError as GenguardError,
        GenguardPinWarning as GenguardPinWarning,
        GenguardTrainingWarning as GenguardTrainingWarning,
        GenguardWarning as GenguardWarning,
        InstallError as InstallError,
        KernelSetUnsupported as KernelSetUnsupported,
        ModelUnavailable as ModelUnavailable,
        PinError as PinError,
        ReleaseError as ReleaseError,
        ServerError as ServerError,
        ServerStale as ServerStale,
        TraceFormatError as TraceFormatError,
        VerifyFallbackWarning as VerifyFallbackWarning,
    )
    from pytest_genguard.core.history import Checkpoint as Checkpoint, RecorderHistory as RecorderHistory
    from pytest_genguard.core.repetition import assert_no_repetition as assert_no_repetition
    from pytest_genguard.core.tolerances import (
        EXACT as EXACT,
        Tolerances as Tolerances,
        tolerances_for as tolerances_for,
    )
    from pytest_genguard.core.trace import (
        GenerationTrace as GenerationTrace,
        ModelFingerprint as ModelFingerprint,
        PromptTrace as PromptTrace,
        Step as Step,
        TokenizerFingerprint as TokenizerFingerprint,
    )
    from pytest_genguard.core.verdict import Verdict as Verdict
    from pytest_genguard.core.well_formed import assert_well_formed as assert_well_formed
    from pytest_genguard.hf.fidelity import calibrate as calibrate, fidelity as fidelity
    from pytest_genguard.hf.finetune import FineTuned as FineTuned, finetune as finetune
    from pytest_genguard.hf.fingerprint import model_fingerprint as model_fingerprint
    from pytest_genguard.hf.gemma3 import (
        gemma3_folder as gemma3_folder,
        gemma3_gguf as gemma3_gguf,
        load_gemma3 as load_gemma3,
    )
    from pytest_genguard.hf.invariants import (
        assert_batch_invariant as assert_batch_invariant,
        assert_cache_invariant as assert_cache_invariant,
        assert_continuation_consistent as assert_continuation_consistent,
        assert_deterministic as assert_deterministic,
    )
    from pytest_genguard.hf.processors import assert_processor_contract as assert_processor_contract
    from pytest_genguard.hf.record import record as record
    from pytest_genguard.hf.recorder import GenerationRecorder as GenerationRecorder
    from pytest_genguard.hf.smollm2 import load_smollm2 as load_smollm2, smollm2_folder as smollm2_folder
    from pytest_genguard.hf.tiny import tiny_model as tiny_model, tiny_tokenizer as tiny_tokenizer
    from pytest_genguard.hf.tokenizer_hash import tokenizer_fingerprint as tokenizer_fingerprint
    from pytest_genguard.hf.verify import verify as verify
