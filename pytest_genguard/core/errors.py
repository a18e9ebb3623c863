"""Every warning and error pytest-genguard raises for its users, in one place (as hypothesis' ``errors.py``).

The warnings share the base `GenguardWarning`, so one filter takes them all
(``-W error::pytest_genguard.GenguardWarning``, or ``filterwarnings = ["ignore::pytest_genguard.GenguardWarning"]``);
the errors share `GenguardError` and keep the built-in base a caller may already catch (`TraceFormatError` is a
`ValueError`, `CacheFolderError` an `OSError`, `EngineUnavailable` an `ImportError`). All are exported from
`pytest_genguard`. Standard library only: the data core, the torch side, the engines and the plugin all raise them.
"""

from __future__ import annotations

__all__ = [
    "BisectError",
    "CacheFolderError",
    "EngineUnavailable",
    "GenguardCacheWarning",
    "GenguardError",
    "GenguardPinWarning",
    "GenguardTrainingWarning",
    "GenguardWarning",
    "InstallError",
    "KernelSetUnsupported",
    "ModelUnavailable",
    "PinError",
    "ReleaseError",
    "ServerError",
    "ServerStale",
    "TraceFormatError",
    "VerifyFallbackWarning",
]


class GenguardWarning(UserWarning):
    """The base of every warning pytest-genguard emits: filter them all with this one class."""


class GenguardTrainingWarning(GenguardWarning):
    """A `GenerationRecorder(on_degenerate="warn"|"stop")` found the model looping during training or evaluation."""


class GenguardCacheWarning(GenguardWarning):
    """A cache entry was unusable (corrupt, half-written, tampered with) and is being rebuilt."""


class GenguardPinWarning(GenguardWarning):
    """No pinned weights for a fine-tuned model: it was trained on this machine, so snapshots of its decoding
    hold only on CPUs whose kernels round as this one's do."""


class VerifyFallbackWarning(GenguardWarning):
    """verify() re-generated the trace (beam search) instead of teacher forcing it."""


class GenguardError(Exception):
    """The base of every error pytest-genguard raises on purpose (bad input, unreadable files, missing extras)."""


class TraceFormatError(GenguardError, ValueError):
    """A trace document that cannot be read: corrupt, hand-broken, or of another schema version."""


class PinError(GenguardError):
    """A pin folder exists but cannot be trusted (missing or modified file, unreadable manifest, other recipe)."""


class CacheFolderError(GenguardError, OSError):
    """The cache folder cannot be created or written (read-only, a file in the way): names it and the fix."""


class EngineUnavailable(GenguardError, ImportError):
    """The engine's extra is not installed; the message is the command that installs it."""


class ModelUnavailable(GenguardError, ImportError):
    """A model genguard ships a loader for cannot be loaded here (its package is missing): names the install command."""


class BisectError(GenguardError, ValueError):
    """Bad input to `bisect()` (an unknown node id, no snapshot, no version to start from): the message says what to
    do."""


class ReleaseError(GenguardError):
    """`bisect()` could not list the releases, or a version given is not one (the message says which and what to do)."""


class InstallError(GenguardError):
    """`bisect()` could not install a release (the message holds uv's last lines); the search skips it."""


class KernelSetUnsupported(GenguardError, RuntimeError):
    """torch cannot run a model's attention under the CPU kernel set in force (``ATEN_CPU_CAPABILITY``): the message
    names torch, the kernel set and the fix for that run (eager attention). torch's own error is its cause."""


class ServerError(GenguardError):
    """A server genguard judges could not answer as asked (unreachable, an HTTP error, a timeout, a malformed or
    short response, a model it does not serve, a logprobs cap below the snapshot's top-k): the message names the
    server, the request and what to do. Nothing is written."""


class ServerStale(GenguardError):
    """The server serves something the snapshot was not recorded with, found before any value is compared (its
    tokenizer turns the snapshot's prompt text into other ids): re-record the snapshot, or point at the right model."""
