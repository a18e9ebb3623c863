"""The genguard options of a run, read and checked once in `pytest_configure`, then kept in `config.stash` as a
frozen `Settings`.

A bad value must stop the run before any test does: an invalid tolerance used to fail every test with a raw
`ValueError`, and under ``--snapshot-update`` syrupy then deleted every snapshot as unused. Each check raises
`pytest.UsageError` (exit code 4) naming the option or ini key, the value and what is accepted.
"""

from __future__ import annotations

import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pytest_genguard.core.tolerances import Overrides

__all__ = [
    "CACHE_ENV_VAR",
    "SETTINGS_KEY",
    "TOLERANCE_EXAMPLES",
    "Settings",
    "check_folder",
    "check_writable_file",
    "is_xdist_worker",
    "settings",
    "settings_from_config",
    "test_overrides",
    "tolerance_ini",
    "where_ini",
    "worker_index",
]

TOLERANCE_EXAMPLES = {"atol": "1e-6", "rtol": "1e-4", "tie_tol": "1e-3", "lse_ulps": "8"}
"""An example value per tolerance (the float32 defaults), for messages."""


def where_ini(config: pytest.Config, name: str) -> str:
    """Where an ini value came from, for messages: ``-o name=...`` or the ini file."""
    overrides = config.getoption("override_ini", default=None) or []
    if any(str(o).split("=", 1)[0].strip() == name for o in overrides):
        return "set with -o"
    return f"in {config.inipath}" if config.inipath is not None else "no ini file"


def tolerance_ini(config: pytest.Config, name: str) -> float | None:
    """The float value of a ``genguard_<tolerance>`` ini key (None when unset); a UsageError when it is not a finite
    number >= 0: NaN compares false with everything, and an infinite tolerance would accept any drift."""
    raw = config.getini(name)
    if raw in (None, ""):
        return None
    text = str(raw).strip()
    example = TOLERANCE_EXAMPLES.get(name.removeprefix("genguard_"), "1e-5")
    head = f"ini option {name} = {text!r}"
    fix = (
        f"({where_ini(config, name)}); a tolerance is a finite number >= 0: write e.g. {name} = {example}, or remove "
        "it to use the dtype default"
    )
    try:
        value = float(text)
    except ValueError:
        raise pytest.UsageError(f"{head} is not a number {fix}") from None
    if math.isnan(value):
        raise pytest.UsageError(f"{head} is not a number (NaN) {fix}")
    if math.isinf(value):
        raise pytest.UsageError(f"{head} is infinite: it would accept any drift {fix}")
    if value < 0:
        raise pytest.UsageError(f"{head} is negative {fix}")
    return value


def _nearest_existing(path: Path) -> Path:
    """`path` or its closest ancestor that exists."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path(path.anchor or ".")


def check_folder(path: Path, what: str, fix: str) -> None:
    """A folder genguard may create: it must be a folder, or creatable (no file in the way). `what` names the
    setting ("ini option genguard_cache_dir = '...' in pytest.ini"), `fix` says what to do."""
    if path.exists() and not path.is_dir():
        raise pytest.UsageError(f"{what}: {path} is a file, not a folder; {fix}")
    found = _nearest_existing(path)
    if not found.is_dir():
        raise pytest.UsageError(f"{what}: {path} cannot be created because {found} is a file; {fix}")


def check_writable_file(path: Path, what: str, fix: str) -> None:
    """A file genguard will write at the end of the run: fail now, not after the tests, when it cannot be written.

    The check creates (and removes) a temporary file in the target folder, or in its nearest existing ancestor when
    the folder will be created: what the write itself will need. Nothing is left behind.
    """
    if path.is_dir():
        raise pytest.UsageError(f"{what}: {path} is a folder; {fix}")
    check_folder(path.parent, what, fix)
    probe_in = _nearest_existing(path.parent)
    try:
        with tempfile.TemporaryFile(dir=probe_in):
            pass
    except OSError as exc:
        raise pytest.UsageError(f"{what}: cannot write in {probe_in} ({exc.strerror or exc}); {fix}") from None


# ------------------------------------------------------------------------------------------------------ settings


@dataclass(frozen=True)
class Settings:
    """The genguard options of this run, parsed once."""

    gpu: bool = False
    update_stale: bool = False
    snapshot_update: bool = False
    rebuild: bool = False
    report: Path | None = None
    reference: Path | None = None
    record_reference: Path | None = None
    baselines: str = "shared"
    atol: float | None = None
    rtol: float | None = None
    tie_tol: float | None = None
    lse_ulps: float | None = None
    cache_dir: Path | None = None
    rootdir: Path = field(default_factory=Path.cwd)
    pin_dir: Path = field(default_factory=lambda: Path.cwd() / "__genguard_pins__")
    server: str | None = None  # --genguard-server: also judge this running server against every snapshot
    server_model: str | None = None
    server_align_sampler: bool = False  # --genguard-server-align-sampler
    gguf: Path | None = None  # --genguard-gguf: also judge this GGUF through llama.cpp against every snapshot
    gguf_kv_cache: str = "f16"
    gguf_model: Path | None = None
    gguf_probe: bool = True  # not --genguard-gguf-no-probe: the long probe, with --genguard-gguf-model
    keep_pending: bool = True  # not --genguard-no-pending: failed comparisons keep their new traces for review
    gguf_baseline: Path | None = None  # --genguard-gguf-baseline: judged against this known-good GGUF

    def tolerance_overrides(self) -> Overrides:
        """The ini tolerances that are set (the rest come from the dtype defaults)."""
        return Overrides(atol=self.atol, rtol=self.rtol, tie_tol=self.tie_tol, lse_ulps=self.lse_ulps)


SETTINGS_KEY = pytest.StashKey[Settings]()


def _path_opt(config: pytest.Config, name: str) -> Path | None:
    value = config.getoption(name)
    return Path(value) if value else None


CACHE_ENV_VAR = "GENGUARD_CACHE_DIR"  # (cache.ENV_VAR; cache.py is not imported at start-up)
_CACHE_FIX = (
    "name a folder genguard may create and write (ini option genguard_cache_dir, or the environment variable "
    f"{CACHE_ENV_VAR} when pytest's cache is disabled)"
)


def _cache_dir(config: pytest.Config) -> Path | None:
    """The ini `genguard_cache_dir` (relative to the rootdir), checked; the environment variable is checked too when
    it is what the cache will use (no ini value and pytest's cache provider disabled)."""
    cache_ini = str(config.getini("genguard_cache_dir") or "").strip()
    if cache_ini:
        path = Path(cache_ini).expanduser()
        path = path if path.is_absolute() else config.rootpath / path
        what = f"ini option genguard_cache_dir = {cache_ini!r} ({where_ini(config, 'genguard_cache_dir')})"
        check_folder(path, what, _CACHE_FIX)
        return path
    env = os.environ.get(CACHE_ENV_VAR, "")
    if env and getattr(config, "cache", None) is None:
        check_folder(Path(env).expanduser(), f"environment variable {CACHE_ENV_VAR}={env!r}", _CACHE_FIX)
    return None


def _report(config: pytest.Config) -> Path | None:
    """`--genguard-report PATH`, checked where it will be written (not in xdist workers, which never write it)."""
    path = _path_opt(config, "genguard_report")
    if path is not None and not hasattr(config, "workerinput"):
        target = path if path.is_absolute() else config.invocation_params.dir / path
        fix = "name an HTML file in a folder you can write, e.g. --genguard-report genguard-report.html"
        check_writable_file(target, f"--genguard-report {path}", fix)
    return path


def _record_reference(config: pytest.Config) -> Path | None:
    path = _path_opt(config, "genguard_record_reference")
    if path is not None:
        check_folder(path, f"--genguard-record-reference {path}", "name a folder for the reference traces")
    return path


_PATH_OPTIONS = frozenset({"--genguard-reference", "--genguard-record-reference", "--genguard-report"})


def project_root(config: pytest.Config) -> Path:
    """The rootdir as pytest finds it without genguard's own paths (what node ids, reference files and the pin
    folder are relative to).

    pytest fixes its rootdir before plugins declare their options, so the value of a genguard path option given
    space-separated (``--genguard-reference /refs``) counts as a test path there: where it exists and no ini file
    or ``--rootdir`` decides, the rootdir moves to a common ancestor of the project and that path. This is pytest's
    rule without those values: a folder with setup.py above the common ancestor of the test paths, else the common
    ancestor of that and the invocation folder; used only where it lies inside the rootdir pytest chose."""
    root = config.rootpath
    args = [str(a) for a in config.invocation_params.args]
    if config.inipath is not None or config.getoption("rootdir", None):
        return root
    if not any(a in _PATH_OPTIONS for a in args[:-1]):  # only a separate value is taken for a test path
        return root
    invocation = config.invocation_params.dir
    paths = [invocation / str(a).split("::")[0] for a in config.args]
    dirs = [p if p.is_dir() else p.parent for p in paths if p.exists()]
    ancestor = Path(os.path.commonpath(dirs)) if dirs else invocation
    with_setup = next((p for p in (ancestor, *ancestor.parents) if (p / "setup.py").is_file()), None)
    found = with_setup or Path(os.path.commonpath([invocation, ancestor]))
    return found if found != root and found.is_relative_to(root) else root


def settings_from_config(config: pytest.Config) -> Settings:
    """The options of this run, each checked: a bad value is a `pytest.UsageError` naming it (exit code 4)."""
    return Settings(
        gpu=bool(config.getoption("genguard_gpu")),
        update_stale=bool(config.getoption("genguard_update_stale")),
        snapshot_update=bool(config.getoption("update_snapshots", default=False)),
        rebuild=bool(config.getoption("genguard_rebuild")),
        report=_report(config),
        reference=_path_opt(config, "genguard_reference"),
        record_reference=_record_reference(config),
        baselines=str(config.getoption("genguard_baselines") or "shared"),
        atol=tolerance_ini(config, "genguard_atol"),
        rtol=tolerance_ini(config, "genguard_rtol"),
        tie_tol=tolerance_ini(config, "genguard_tie_tol"),
        lse_ulps=tolerance_ini(config, "genguard_lse_ulps"),
        cache_dir=_cache_dir(config),
        rootdir=project_root(config),
        pin_dir=project_root(config) / str(config.getini("genguard_pin_dir") or "__genguard_pins__"),
        server=_server(config),
        server_model=config.getoption("genguard_server_model") or None,
        server_align_sampler=bool(config.getoption("genguard_server_align_sampler")),
        keep_pending=not config.getoption("genguard_no_pending", default=False),
        gguf=_existing(config, "genguard_gguf", "the .gguf file llama.cpp runs"),
        gguf_kv_cache=str(config.getoption("genguard_gguf_kv_cache") or "f16"),
        gguf_model=_existing(config, "genguard_gguf_model", "the folder save_pretrained wrote"),
        gguf_probe=not config.getoption("genguard_gguf_no_probe", False),
        gguf_baseline=_gguf_baseline(config),
    )


def _gguf_baseline(config: pytest.Config) -> Path | None:
    """``--genguard-gguf-baseline``: an existing file, only with ``--genguard-gguf`` (what it is the baseline of)."""
    baseline = _existing(config, "genguard_gguf_baseline", "the known-good .gguf file to judge against")
    if baseline is not None and not config.getoption("genguard_gguf"):
        raise pytest.UsageError(
            f"--genguard-gguf-baseline {baseline}: judges the file of --genguard-gguf FILE against it; pass that too"
        )
    return baseline


def _existing(config: pytest.Config, option: str, what: str) -> Path | None:
    """The path an option names, which must exist (a usage error naming the option and what to pass otherwise)."""
    value = config.getoption(option)
    if not value:
        return None
    path = Path(str(value)).expanduser()
    if not path.exists():
        flag = "--" + option.replace("_", "-")
        raise pytest.UsageError(f"{flag} {value}: no such file or folder; pass {what}")
    return path.resolve()


def _server(config: pytest.Config) -> str | None:
    url = config.getoption("genguard_server")
    if url and not str(url).startswith(("http://", "https://")):
        raise pytest.UsageError(
            f"--genguard-server {url}: write the server's URL with its scheme, e.g. http://127.0.0.1:8000"
        )
    return str(url) if url else None


def settings(config: pytest.Config) -> Settings:
    return config.stash.get(SETTINGS_KEY, Settings())


def test_overrides(item: pytest.Item) -> Overrides:
    """A test's tolerances as far as they are valid: its ``genguard`` markers (closest wins) on the ini options.
    (The snapshot fixture validates the marker and fails the test on a bad value; this only reads it.)"""
    merged: dict[str, object] = {}
    for mark in reversed(list(item.iter_markers("genguard"))):
        merged.update(mark.kwargs)
    return Overrides.of(merged).over(settings(item.config).tolerance_overrides())


def is_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput") or "PYTEST_XDIST_WORKER" in os.environ


def worker_index(config: pytest.Config) -> int:
    """0-based index of this xdist worker ('gw3' -> 3), 0 outside xdist."""
    workerinput = getattr(config, "workerinput", None)
    name = str(workerinput.get("workerid", "gw0")) if isinstance(workerinput, dict) else ""
    name = name or os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    digits = "".join(ch for ch in name if ch.isdigit())
    return int(digits) if digits else 0
