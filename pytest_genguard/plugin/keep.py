"""What ``--snapshot-update`` may delete: the snapshots of tests that no longer exist, and nothing else.

syrupy deletes, with ``--snapshot-update``, every snapshot file that no assertion used in the run, keeping only those
of skipped tests. Measured on syrupy 7.0.2, that loses the snapshot of a test that failed or errored before its
assertion (and ``--snapshot-update`` is syrupy's own advice after a failure), of every test after the first failure
under ``-x``, of every test not run after Ctrl-C, and of every test in the project when one test module fails to
import. genguard decides for its own files:

- At configure time it adds ``genguard`` to syrupy's ``--snapshot-ignore-file-extensions``, so no other extension
  discovers a ``.genguard`` file (syrupy's default extension otherwise claims every file under ``__snapshots__`` it
  does not know as an orphan, and deletes it).
- `GenguardSnapshotExtension.discover_snapshots` discovers them and, while the session finishes, withholds from
  syrupy's unused-snapshot detection each file whose test ran in this process and did not pass (failed, errored or
  skipped), whose test was collected but did not run in this process (another pytest-xdist worker ran it and decides
  for it, or the run stopped early), or whose test module failed to collect.

Files of tests that no longer exist are still discovered and deleted, and so are unused files of tests that passed
(a test that no longer makes its second assertion). Each process lists what it withheld (workers send the list to
the controller in ``config.workeroutput``), and the terminal summary names the files that were kept (`kept`).
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from syrupy.data import SnapshotCollections
    from syrupy.extensions.base import AbstractSyrupyExtension
    from syrupy.location import PyTestLocation

__all__ = ["LEDGER_KEY", "OWN_EXTENSION", "WORKER_OUTPUT", "Kept", "Ledger", "kept", "withhold"]

OWN_EXTENSION = "genguard"
WORKER_OUTPUT = "genguard_withheld"

# Why a file was withheld, as seen by one process (the controller combines them with every test's outcome).
FAILED, ERRORED, SKIPPED, NOT_RUN, NOT_COLLECTED = "failed", "errored", "skipped", "did not run", "not collected"


@dataclass
class Ledger:
    """What this process saw of the run, for deciding which snapshot files syrupy may count as unused."""

    items: list[pytest.Item] = field(default_factory=list)
    deselected: set[str] = field(default_factory=set)
    outcomes: dict[str, str] = field(default_factory=dict)  # node id -> FAILED, ERRORED, SKIPPED or "passed"
    broken: set[Path] = field(default_factory=set)  # modules (or folders) whose collection failed
    skipped: set[Path] = field(default_factory=set)  # modules skipped as a whole (pytest.importorskip, ...)
    asserted: set[str] = field(default_factory=set)  # snapshot files a genguard_snapshot assertion used here
    finishing: bool = False  # set while the session finishes: only then is unused detection running
    user_ignores_own: bool = False  # the user passed --snapshot-ignore-file-extensions genguard themselves
    withheld: list[dict[str, Any]] = field(default_factory=list)  # this process's (sent to the controller)
    remote: list[dict[str, Any]] = field(default_factory=list)  # the workers' (on the xdist controller)
    _owners: dict[type[Any], dict[Path, list[tuple[str, str]]]] = field(default_factory=dict)

    def record(self, report: pytest.TestReport) -> None:
        """A test's outcome: whether it reached the end of its call (the teardown does not change that)."""
        if report.when == "setup" and report.outcome != "passed":
            self.outcomes[report.nodeid] = ERRORED if report.failed else SKIPPED
        elif report.when == "call":
            self.outcomes[report.nodeid] = report.outcome

    def collected(self, report: pytest.CollectReport, rootpath: Path) -> None:
        """Remember a module (or folder) that failed to collect or was skipped as a whole: its tests exist, but
        pytest has no item for them, so nothing else tells their snapshots from those of removed tests."""
        if report.nodeid and (report.failed or report.skipped):
            (self.broken if report.failed else self.skipped).add(rootpath / report.nodeid.split("::", 1)[0])

    def owners(self, extension_class: type[AbstractSyrupyExtension]) -> dict[Path, list[tuple[str, str]]]:
        """Snapshot folder -> (snapshot base name, node id) of each collected, selected test."""
        if extension_class not in self._owners:
            from syrupy.location import PyTestLocation

            index: dict[Path, list[tuple[str, str]]] = {}
            for item in self.items:
                if not isinstance(item, pytest.Function) or item.nodeid in self.deselected:
                    continue
                location = PyTestLocation(item)
                folder = Path(extension_class.dirname(test_location=location))
                base = extension_class.get_snapshot_name(test_location=location, index=0)
                index.setdefault(folder, []).append((base, item.nodeid))
            self._owners[extension_class] = index
        return self._owners[extension_class]

    def reason(self, extension_class: type[AbstractSyrupyExtension], location: str, name: str) -> dict[str, Any] | None:
        """Why `location` must not count as unused (a JSON-able record), or None when syrupy may decide."""
        path = Path(location)
        owners = [nodeid for base, nodeid in self.owners(extension_class).get(path.parent, []) if _owns(base, name)]
        if not owners:
            module = path.parent.parent.parent / f"{path.parent.name}.py"
            for modules, why in ((self.broken, NOT_COLLECTED), (self.skipped, SKIPPED)):
                if any(module == m or m in module.parents for m in modules):
                    return _record(location, owners, why, self)
            return None  # no such test any more: syrupy deletes it on --snapshot-update
        outcomes = [self.outcomes.get(nodeid, NOT_RUN) for nodeid in owners]
        if all(outcome == "passed" for outcome in outcomes):
            return None
        worst = next(o for o in (ERRORED, FAILED, SKIPPED, NOT_RUN) if o in outcomes)
        return _record(location, owners, worst, self)


def _owns(base: str, name: str) -> bool:
    """Whether snapshot `name` belongs to the test whose first snapshot is `base` (``test_x``, ``test_x.1``,
    ``test_x[name]``; a parametrized test's base carries its id: ``test_x[a]``, ``test_x[a].1``)."""
    return name == base or name.startswith((f"{base}.", f"{base}["))


def _record(location: str, owners: list[str], why: str, ledger: Ledger) -> dict[str, Any]:
    return {"path": location, "owners": owners, "why": why, "asserted": location in ledger.asserted}


LEDGER_KEY = pytest.StashKey[Ledger]()


def ledger_of(test_location: PyTestLocation) -> Ledger | None:
    """The ledger of the process a test location belongs to (None for syrupy's stand-in items on the controller,
    or when the genguard plugin is not active)."""
    config = getattr(test_location.item, "config", None)
    return None if config is None else config.stash.get(LEDGER_KEY, None)


def own_ignore(test_location: PyTestLocation, ignore_extensions: list[str] | None) -> list[str] | None:
    """syrupy's ignore list without genguard's own entry (genguard adds it only to hide its files from the others)."""
    ledger = ledger_of(test_location)
    if ignore_extensions is None or ledger is None or ledger.user_ignores_own:
        return ignore_extensions
    return [ext for ext in ignore_extensions if ext != OWN_EXTENSION]


def withhold(
    extension_class: type[AbstractSyrupyExtension], test_location: PyTestLocation, found: SnapshotCollections
) -> SnapshotCollections:
    """`found` without the collections syrupy must not count as unused (only while the session finishes)."""
    ledger = ledger_of(test_location)
    if ledger is None or not ledger.finishing:
        return found
    from syrupy.data import SnapshotCollections

    kept = SnapshotCollections()
    seen = {w["path"] for w in ledger.withheld}
    for collection in found:
        names = [snapshot.name for snapshot in collection]
        record = ledger.reason(extension_class, collection.location, names[0]) if names else None
        if record is None:
            kept.add(collection)
        elif collection.location not in seen:
            ledger.withheld.append(record)
            seen.add(collection.location)
    return kept


@dataclass(frozen=True)
class Kept:
    """A snapshot file genguard kept from deletion, and why."""

    path: Path
    owners: tuple[str, ...]
    why: str


def kept(ledger: Ledger, snapshot_dirname: str = "__snapshots__") -> list[Kept]:
    """The withheld files (of this process and of the xdist workers) that are still there and that no assertion of
    this run used, with the outcome of their tests (this process saw every test's report); and the files of modules
    that failed to collect (a run interrupted by a collection error discovers none)."""
    merged: dict[str, dict[str, Any]] = {}
    broken = [
        {"path": str(path), "owners": [], "why": why, "asserted": False}
        for modules, why in ((ledger.broken, NOT_COLLECTED), (ledger.skipped, SKIPPED))
        for module in modules
        if module.suffix == ".py"
        for path in (module.parent / snapshot_dirname / module.stem).glob(f"*.{OWN_EXTENSION}")
    ]
    for record in [*ledger.withheld, *ledger.remote, *broken]:
        entry = merged.setdefault(record["path"], {"owners": set(), "why": set(), "asserted": False})
        entry["owners"].update(record["owners"])
        entry["why"].add(record["why"])
        entry["asserted"] = entry["asserted"] or bool(record["asserted"])
    out = []
    for location, entry in sorted(merged.items()):
        path = Path(location)
        if entry["asserted"] or not path.exists():
            continue
        owners = sorted(entry["owners"])
        outcomes = {ledger.outcomes.get(nodeid, NOT_RUN) for nodeid in owners}
        if "passed" in outcomes:
            continue  # its test passed in another worker, which decided for the file
        why = next((o for o in (ERRORED, FAILED, SKIPPED) if o in outcomes or o in entry["why"]), None)
        if why is None:
            why = NOT_COLLECTED if NOT_COLLECTED in entry["why"] else NOT_RUN
        out.append(Kept(path, tuple(owners), why))
    return out


# ---------------------------------------------------------------------------------------------------- wiring


def configure(config: pytest.Config) -> None:
    """Start the ledger, hide ``.genguard`` files from syrupy's other extensions, register the hooks."""
    config.stash[LEDGER_KEY] = ledger = Ledger()
    if hasattr(config.option, "ignore_file_extensions"):  # syrupy's --snapshot-ignore-file-extensions
        ignored = list(config.option.ignore_file_extensions or [])
        ledger.user_ignores_own = OWN_EXTENSION in ignored
        config.option.ignore_file_extensions = [*ignored, OWN_EXTENSION]
    workeroutput = getattr(config, "workeroutput", None)
    if isinstance(workeroutput, dict):  # an xdist worker: sent to the controller after the session finishes
        workeroutput[WORKER_OUTPUT] = ledger.withheld
    config.pluginmanager.register(Keeper(config, ledger), "genguard-keeper")


class Keeper:
    """The hooks that fill the ledger."""

    def __init__(self, config: pytest.Config, ledger: Ledger) -> None:
        self.config = config
        self.ledger = ledger

    def pytest_itemcollected(self, item: pytest.Item) -> None:
        self.ledger.items.append(item)

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        self.ledger.deselected.update(item.nodeid for item in items)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        self.ledger.collected(report, self.config.rootpath)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.ledger.record(report)

    @pytest.hookimpl(wrapper=True)
    def pytest_sessionfinish(self) -> Generator[None, object, object]:
        self.ledger.finishing = True  # syrupy's unused-snapshot detection runs inside
        return (yield)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """pytest-xdist, on the controller: what a worker withheld."""
        output = getattr(node, "workeroutput", None)
        if isinstance(output, dict):
            self.ledger.remote.extend(output.get(WORKER_OUTPUT, []))
