"""The pytest plugin: options, ini, markers, fixtures, report header and terminal summary. Wiring only.

pytest imports this module in every project where pytest-genguard is installed, so it imports nothing heavy: torch
and transformers load when a genguard fixture or function is first used.
"""

from __future__ import annotations

import sys
from collections.abc import Generator
from importlib import metadata
from typing import Any

import pytest

# The modules that hold assertion helpers (before anything imports them).
pytest.register_assert_rewrite(
    "pytest_genguard.core.repetition",
    "pytest_genguard.core.well_formed",
    "pytest_genguard.hf.invariants",
    "pytest_genguard.hf.processors",
    "pytest_genguard.plugin.snapshot_fixture",
)

from pytest_genguard.core import events, tolerances  # noqa: E402
from pytest_genguard.core.presets import KV_CACHE_TYPES  # noqa: E402
from pytest_genguard.plugin import distributed, keep, offline, pending  # noqa: E402
from pytest_genguard.plugin.fixtures import (  # noqa: E402,F401
    genguard_device,
    genguard_devices,
    genguard_engine,
    genguard_finetune,
    genguard_snapshot,
    genguard_tokenizer,
)
from pytest_genguard.plugin.settings import (  # noqa: E402
    SETTINGS_KEY,
    settings,
    settings_from_config,
    test_overrides,
)
from pytest_genguard.plugin.summary import GenguardReporter  # noqa: E402
from pytest_genguard.plugin.tally import EVENTS_KEY, TALLY_KEY, USER_PROPERTY, Tally  # noqa: E402


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("genguard", "genguard: regression tests for model decoding")
    group.addoption(
        "--genguard-gpu",
        action="store_true",
        default=False,
        help="run genguard fixtures and record() on CUDA in deterministic mode, and run tests marked genguard_gpu.",
    )
    group.addoption(
        "--genguard-update-stale",
        action="store_true",
        default=False,
        help="re-record only snapshots whose model/tokenizer/settings changed; regressions keep failing.",
    )
    group.addoption(
        "--genguard-rebuild",
        action="store_true",
        default=False,
        help="retrain genguard_finetune models instead of using the cache.",
    )
    group.addoption("--genguard-report", metavar="PATH", default=None, help="write a self-contained HTML report.")
    group.addoption(
        "--genguard-no-pending",
        action="store_true",
        default=False,
        help="keep no new traces of failed comparisons for `genguard review` (CI, where nobody reviews them: "
        "verify() then records nothing more).",
    )
    group.addoption(
        "--genguard-record-reference",
        metavar="DIR",
        default=None,
        help="write this environment's traces to DIR (reference traces for another environment).",
    )
    group.addoption(
        "--genguard-reference",
        metavar="DIR",
        default=None,
        help="compare this run's traces against reference traces in DIR with the tolerant rule.",
    )
    group.addoption(
        "--genguard-baselines",
        choices=("shared", "per-env"),
        default="shared",
        help="snapshots shared by all environments (default), or kept per environment class (cpu-float32, ...).",
    )
    group.addoption(
        "--genguard-server",
        metavar="URL",
        default=None,
        help="also judge a running server (vLLM, llama-server) against every snapshot the tests assert, over HTTP.",
    )
    group.addoption("--genguard-server-model", metavar="NAME", default=None, help="the served model's name.")
    group.addoption(
        "--genguard-server-align-sampler",
        action="store_true",
        default=False,
        help="send the server the request fields that align its sampler with transformers' (llama-server: samplers, "
        "repeat_last_n) when judging sampled snapshots.",
    )
    group.addoption(
        "--genguard-gguf",
        metavar="FILE",
        default=None,
        help="also judge a GGUF file through llama.cpp (in process, teacher forced) against every snapshot the tests "
        "assert; needs the llama_cpp extra.",
    )
    group.addoption(
        "--genguard-gguf-kv-cache",
        choices=KV_CACHE_TYPES,
        default="f16",
        help="llama.cpp's KV cache type for --genguard-gguf (default: f16, llama.cpp's own).",
    )
    group.addoption(
        "--genguard-gguf-model",
        metavar="DIR",
        default=None,
        help="the snapshots' model as save_pretrained wrote it: --genguard-gguf also checks the GGUF's metadata, "
        "judges exactly (full vocabulary) and reads the long probe through both.",
    )
    group.addoption(
        "--genguard-gguf-no-probe",
        action="store_true",
        default=False,
        help="leave out the long probe (a built-in text of 2,048 tokens through the GGUF and --genguard-gguf-model).",
    )
    group.addoption(
        "--genguard-gguf-baseline",
        metavar="FILE",
        default=None,
        help="judge the --genguard-gguf file against this known-good GGUF of the same model (the file you shipped) "
        "instead of a budget: both measured in the run against the same reference, band by band on the long probe.",
    )
    parser.addini("genguard_atol", "absolute tolerance for logprobs (default: by dtype)", default="")
    parser.addini("genguard_rtol", "relative tolerance for logprobs (default: by dtype)", default="")
    parser.addini(
        "genguard_tie_tol", "logprob gap under which a divergence is a near tie (default: by dtype)", default=""
    )
    parser.addini(
        "genguard_lse_ulps",
        "rounding allowance in epsilons of the logprobs' dtype times each step's log-sum-exp (default: 8)",
        default="",
    )
    parser.addini("genguard_cache_dir", "where fine-tuned models are cached (default: pytest's cache dir)", default="")
    parser.addini(
        "genguard_pin_dir",
        "where pinned fine-tuned weights live, relative to the rootdir (default: __genguard_pins__); commit it",
        default="",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "genguard(atol=None, rtol=None, tie_tol=None, lse_ulps=None, allow_nonfinite=False, allow_dtype_change=False, "
        "fidelity=None): per-test tolerances for genguard comparisons; allow_nonfinite=True lets a snapshot hold "
        "NaN/inf logprobs or scores; allow_dtype_change=True lets a snapshot of one dtype judge a run in another; "
        "fidelity='int8' (bf16, fp16, int8, int4, or a mapping of limits) judges the snapshot by a fidelity budget.",
    )
    config.addinivalue_line(
        "markers", "genguard_gpu: needs CUDA; runs only with --genguard-gpu (skipped with a reason otherwise)."
    )
    current = settings_from_config(config)  # a bad value stops here (exit 4), before any snapshot is touched
    current = distributed.configure(config, current)  # under torchrun, the ranks but 0 judge and never write
    config.stash[SETTINGS_KEY] = current
    config.stash[TALLY_KEY] = Tally()
    keep.configure(config)  # what --snapshot-update may delete
    config.pluginmanager.register(GenguardReporter(config), "genguard-reporter")
    if current.gpu:
        from pytest_genguard.plugin.gpu import configure_gpu  # imports torch: only with --genguard-gpu

        configure_gpu(config)
    if current.reference is not None or current.record_reference is not None:
        from pytest_genguard.plugin.reference import configure_reference  # only with the reference options

        configure_reference(config)
    if not config.pluginmanager.has_plugin("syrupy"):  # -p no:syrupy: say what genguard_snapshot misses
        config.pluginmanager.register(_WithoutSyrupy(), "genguard-without-syrupy")


class _WithoutSyrupy:
    """Stands in for syrupy's `snapshot` fixture in a run that disabled syrupy's plugin, so that genguard_snapshot
    (which builds on it) fails with what to do rather than "fixture 'snapshot' not found"."""

    @pytest.fixture
    def snapshot(self) -> None:
        pytest.fail(
            "genguard_snapshot needs syrupy's pytest plugin (genguard stores snapshots through it), and this run "
            "disabled it (-p no:syrupy): drop -p no:syrupy from the command line, addopts or PYTEST_ADDOPTS",
            pytrace=False,
        )


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    distributed.finish()  # under torchrun: every rank has written and printed before any exits


def pytest_report_header(config: pytest.Config) -> list[str]:
    current = settings(config)
    versions = []
    for dist in ("torch", "transformers", "syrupy"):
        try:
            versions.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{dist} missing")
    lines = [f"genguard: {', '.join(versions)}"]
    if current.gpu:
        from pytest_genguard.plugin.gpu import header_lines  # imports torch: only with --genguard-gpu

        lines.extend(header_lines(config))
    else:
        lines.append("genguard: device cpu (--genguard-gpu runs on CUDA)")
    return lines


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("genguard_gpu") is not None and not settings(item.config).gpu:
        pytest.skip("genguard_gpu test: needs CUDA, run with --genguard-gpu")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
    collected: list[events.Event] = []
    item.stash[EVENTS_KEY] = collected
    token = events.begin(collected)
    # What record() calls a fragile step follows this test's tie tolerance (ini options, then its marker).
    in_force = tolerances.begin_in_force(test_overrides(item))
    try:
        return (yield)
    finally:
        tolerances.end_in_force(in_force)
        events.end(token)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    if report.failed and call.excinfo is not None:
        hint = offline.download_hint(call.excinfo.value)
        if hint is not None:
            report.sections.append((offline.SECTION, hint))
    # events of a fixture that failed or skipped too (a pin it loaded is a pin in use)
    if report.when == "call" or (report.when == "setup" and not report.passed):
        collected = item.stash.get(EVENTS_KEY, [])
        pending.settle(item, report, collected)  # a test that did not fail keeps no trace for review
        if collected:  # as JSON-able dicts: pytest-xdist sends them from the workers
            report.user_properties.append((USER_PROPERTY, [events.to_json(e) for e in collected]))
    return report


def pytest_assertrepr_compare(config: pytest.Config, op: str, left: object, right: object) -> list[str] | None:
    # No genguard_snapshot can exist before its module is imported (it imports syrupy): look, do not import.
    fixture = sys.modules.get("pytest_genguard.plugin.snapshot_fixture")
    if fixture is not None:
        lines: list[str] | None = fixture.assertrepr(op, left, right)
        if lines is not None:
            return lines
    if op == "==" and "pytest_genguard.core.trace" in sys.modules:  # nor a trace before its module is
        # The rule loads when a failure is explained, not at start-up.
        from pytest_genguard.core.compare import compare
        from pytest_genguard.core.trace import GenerationTrace

        if isinstance(left, GenerationTrace) and isinstance(right, GenerationTrace):
            # The right operand is the reference: `assert new == recorded` reads like `assert trace == snapshot`.
            explanation = str(compare(right, left)).splitlines()
            return ["GenerationTrace == GenerationTrace (left: new, right: recorded)", *explanation]
    return None
