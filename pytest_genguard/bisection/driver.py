"""`bisect()`: which release of transformers (or torch) changed what a snapshot test sees.

The good release defaults to the one recorded in the test's snapshot (its trace's ``environment``), the bad one to the
release installed here. The releases between them come from the package index (`releases`), the installed one is
probed here and every other one in its own cached environment layered over this one (`environments`), the test runs
there (`probing`), and `search` halves the range.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from pytest_genguard.bisection.environments import Environments, PackageSources, cache_root
from pytest_genguard.bisection.probing import Prober
from pytest_genguard.bisection.releases import ReleaseError, between, index_versions, parse_version
from pytest_genguard.bisection.search import Outcome, ProbeResult, SearchResult, search
from pytest_genguard.core.documents import parse_document
from pytest_genguard.core.errors import BisectError, TraceFormatError
from pytest_genguard.core.trace import GenerationTrace

__all__ = ["BisectError", "BisectResult", "bisect", "recorded_version", "snapshot_files"]

PACKAGES = ("transformers", "torch")
SNAPSHOT_SUFFIX = ".genguard"


@dataclass(frozen=True)
class BisectResult:
    """What `bisect()` found: the outcome, the releases it chose from and every probe (`search.SearchResult`)."""

    nodeid: str
    package: str
    good: str
    bad: str
    versions: tuple[str, ...]
    search: SearchResult
    seconds: float

    @property
    def outcome(self) -> Outcome:
        return self.search.outcome

    @property
    def first_bad(self) -> str | None:
        """The first release whose verdict differs from the good one's (None unless the outcome is FOUND)."""
        found = self.search.first_bad
        return found.version if found is not None and self.outcome is Outcome.FOUND else None

    @property
    def probes(self) -> tuple[ProbeResult, ...]:
        return self.search.probes


def snapshot_files(nodeid: str, rootdir: Path) -> list[Path]:
    """The ``.genguard`` snapshot files of a test node (``tests/test_x.py::test_y[p]``), as syrupy names them:
    ``__snapshots__/<module>/<test>.genguard``, ``<test>.1.genguard``, ``<test>[name].genguard``."""
    module, sep, rest = nodeid.partition("::")
    if not sep or not module.endswith(".py"):
        raise BisectError(
            f"{nodeid!r} is not a test node id: pass it as pytest prints it, e.g. tests/test_x.py::test_y"
        )
    path = rootdir / module
    if not path.exists():
        raise BisectError(f"{nodeid}: no test module {path} (run genguard bisect from the pytest rootdir)")
    name = rest.replace("::", ".")
    folder = path.parent / "__snapshots__" / path.stem
    if not folder.is_dir():
        return []
    found = []
    for candidate in sorted(folder.glob(f"*{SNAPSHOT_SUFFIX}")):
        stem = candidate.name[: -len(SNAPSHOT_SUFFIX)]
        if stem == name or stem.startswith((name + ".", name + "[")):
            found.append(candidate)
    return found


def recorded_version(files: Sequence[Path], package: str) -> str | None:
    """The `package` version recorded in the first readable snapshot's environment (None when none says)."""
    for file in files:
        try:
            document = parse_document(file.read_text(encoding="utf-8"), str(file))
        except (OSError, UnicodeDecodeError, TraceFormatError):
            continue
        trace = document if isinstance(document, GenerationTrace) else (document[0].trace if document else None)
        version = trace.environment.get(package) if trace is not None else None
        if version:
            return str(version)
    return None


def installed_version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def bisect(
    nodeid: str,
    *,
    package: str = "transformers",
    good: str | None = None,
    bad: str | None = None,
    pre: bool = False,
    find_links: Sequence[str] = (),
    rootdir: Path | str = ".",
    cache_dir: Path | str | None = None,
    pytest_args: Sequence[str] = (),
    versions: Sequence[str] | None = None,
    probe: Callable[[str], ProbeResult] | None = None,
    on_probe: Callable[[ProbeResult], None] | None = None,
) -> BisectResult:
    """Name the first release of `package` between `good` and `bad` whose verdict on test `nodeid` differs from
    `good`'s. `good` defaults to the version recorded in the test's snapshot, `bad` to the installed one; the releases
    between come from the package index (`pre`: with pre-releases), or `versions`. The release installed here is
    probed in this interpreter; every other one is installed with uv in its own cached environment layered over this
    one (`find_links`: local wheel folders, added to pip's own configuration) and the test runs there; `probe`
    replaces that (tests). `on_probe` sees each probe as it finishes. Raises BisectError on bad
    input (ReleaseError when the releases cannot be listed)."""
    root = Path(rootdir).resolve()
    if package not in PACKAGES and probe is None:
        raise BisectError(f"--package {package}: bisect replays snapshots across {' or '.join(PACKAGES)} releases")
    files = snapshot_files(nodeid, root)
    if good is None:
        if not files:
            raise BisectError(
                f"{nodeid}: no genguard snapshot found next to its module (__snapshots__/...): pass --good VERSION"
            )
        good = recorded_version(files, package)
        if good is None:
            raise BisectError(f"{files[0]}: its environment names no {package} version: pass --good VERSION")
    if bad is None:
        bad = installed_version(package)
        if bad is None:
            raise BisectError(f"{package} is not installed here: pass --bad VERSION")
    parse_version(good, "--good")  # genguard's own error, before pip is asked anything
    parse_version(bad, "--bad")
    if versions is None:
        listed = index_versions(package, pre=pre) if good.split("+")[0] != bad.split("+")[0] else []
        versions = between(listed, good, bad)
    elif list(versions[:1]) != [good] or list(versions[-1:]) != [bad]:
        raise ReleaseError(f"versions must run from --good {good} to --bad {bad}, got {list(versions)}")
    if probe is None:
        environments = Environments(
            package,
            PackageSources.from_pip(tuple(find_links)),
            Path(cache_dir) if cache_dir is not None else cache_root() / "bisect",
        )
        probe = Prober(nodeid, environments, root, tuple(pytest_args))
    start = time.monotonic()
    result = search(versions, probe, on_probe=on_probe)
    return BisectResult(nodeid, package, good, bad, tuple(versions), result, time.monotonic() - start)
