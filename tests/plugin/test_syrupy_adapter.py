"""genguard reaches into syrupy past its extension API in one module, `plugin/syrupy_adapter.py`; this fails by name
when a syrupy release changes what that module relies on (CI also runs the plugin tests on syrupy's newest release)."""

from __future__ import annotations

import importlib.metadata

import pytest
from syrupy.assertion import SnapshotAssertion

from pytest_genguard.plugin.snapshot import GenguardSnapshotExtension, Plan
from pytest_genguard.plugin.syrupy_adapter import SYRUPY_INTERNALS, SyrupyAssertion


def test_the_syrupy_internals_genguard_uses_are_there(snapshot: SnapshotAssertion) -> None:
    version = importlib.metadata.version("syrupy")
    missing = [name for name in SYRUPY_INTERNALS if not hasattr(snapshot, name)]
    assert not missing, (
        f"syrupy {version} has no SnapshotAssertion.{missing}: update pytest_genguard/plugin/syrupy_adapter.py"
    )
    assert callable(getattr(snapshot.session, "recall_snapshot", None)), f"syrupy {version}: no session.recall_snapshot"
    assert isinstance(snapshot.update_snapshots, bool) and isinstance(snapshot.update_new_snapshots_only, bool)
    assert isinstance(snapshot.num_executions, int) and isinstance(snapshot.executions, dict)


def test_the_plan_is_handed_to_the_extension_when_the_fixture_starts(snapshot: SnapshotAssertion) -> None:
    # (What run() does with it, writing or not, is the subject of the pytester tests: an assertion run here would
    # count in this session's own syrupy report.)
    plan = Plan()
    adapter = SyrupyAssertion(snapshot, plan)
    assert isinstance(adapter.extension, GenguardSnapshotExtension) and adapter.extension.plan is plan
    assert adapter.stored_text() is None  # no snapshot for this test
    assert adapter.location.name == "test_the_plan_is_handed_to_the_extension_when_the_fixture_starts.genguard"


@pytest.mark.parametrize("name", ["x"])
def test_the_next_snapshot_is_named_as_syrupy_names_it(snapshot: SnapshotAssertion, name: str) -> None:
    adapter = SyrupyAssertion(snapshot, Plan())
    assert adapter.name == "test_the_next_snapshot_is_named_as_syrupy_names_it[x]"
    assert adapter.index == 0 and adapter.new_only is False
