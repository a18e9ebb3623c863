"""The content-addressed cache: built once under a lock, stored atomically, corrupt entries detected and rebuilt."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_genguard.hf.cache import (
    MANIFEST,
    CacheCorrupt,
    GenguardCacheWarning,
    cache_key,
    default_cache_dir,
    fetch,
    verify_entry,
)
from pytest_genguard.plugin.finetune_fixture import cache_dir_for

KEY = cache_key({"arch": "toy", "seed": 0})


class Store:
    """A toy builder/loader pair that counts builds and loads."""

    def __init__(self, payload: str = "weights") -> None:
        self.payload = payload
        self.builds = 0
        self.loads = 0
        self.build_delay = 0.0

    def build(self, tmp: Path) -> tuple[str, dict[str, Any]]:
        self.builds += 1
        time.sleep(self.build_delay)
        (tmp / "model.bin").write_text(self.payload)
        (tmp / "history.json").write_text("{}")
        return self.payload, {"note": "toy"}

    def load(self, entry: Path, manifest: dict[str, Any]) -> str:
        self.loads += 1
        text = (entry / "model.bin").read_text()
        if manifest.get("note") != "toy":
            raise CacheCorrupt("manifest note is not toy")
        return text


def test_a_missing_entry_is_built_then_loaded_from_the_cache(tmp_path: Path) -> None:
    store = Store()
    first = fetch(tmp_path, KEY, build=store.build, load=store.load)
    second = fetch(tmp_path, KEY, build=store.build, load=store.load)
    assert (first.from_cache, second.from_cache) == (False, True)
    assert (store.builds, store.loads) == (1, 1)
    assert first.value == second.value == "weights"
    assert first.path == second.path == tmp_path / KEY
    manifest = json.loads((tmp_path / KEY / MANIFEST).read_text())
    assert manifest["key"] == KEY and manifest["note"] == "toy"
    assert sorted(manifest["files"]) == ["history.json", "model.bin"]
    assert verify_entry(tmp_path / KEY, KEY) == manifest


def test_a_failing_build_leaves_no_entry_and_no_temporary_files(tmp_path: Path) -> None:
    def build(tmp: Path) -> tuple[str, dict[str, Any]]:
        (tmp / "model.bin").write_text("half")
        raise RuntimeError("killed mid-training")

    with pytest.raises(RuntimeError, match="killed"):
        fetch(tmp_path, KEY, build=build, load=Store().load)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{KEY}.lock"]


def test_leftovers_of_a_killed_build_are_swept(tmp_path: Path) -> None:
    leftover = tmp_path / f".build-{KEY[:16]}-deadbeef"
    leftover.mkdir()
    (leftover / "model.bin").write_text("half")
    fetch(tmp_path, KEY, build=Store().build, load=Store().load)
    assert not leftover.exists()


@pytest.mark.parametrize("damage", ["truncate_weights", "delete_manifest", "unreadable_manifest", "delete_file"])
def test_a_corrupt_entry_is_reported_with_its_path_and_rebuilt(tmp_path: Path, damage: str) -> None:
    store = Store()
    fetch(tmp_path, KEY, build=store.build, load=store.load)
    entry = tmp_path / KEY
    if damage == "truncate_weights":
        (entry / "model.bin").write_text("wei")
    elif damage == "delete_manifest":
        (entry / MANIFEST).unlink()
    elif damage == "unreadable_manifest":
        (entry / MANIFEST).write_text('{"key": ')
    else:
        (entry / "history.json").unlink()
    with pytest.warns(GenguardCacheWarning, match=str(entry)):
        again = fetch(tmp_path, KEY, build=store.build, load=store.load)
    assert not again.from_cache and again.value == "weights"
    assert store.builds == 2
    assert fetch(tmp_path, KEY, build=store.build, load=store.load).from_cache  # healthy again


def test_an_entry_the_loader_rejects_is_rebuilt_with_a_warning(tmp_path: Path) -> None:
    store = Store()
    fetch(tmp_path, KEY, build=store.build, load=store.load)
    manifest_path = tmp_path / KEY / MANIFEST
    manifest = json.loads(manifest_path.read_text())
    manifest_path.write_text(json.dumps({**manifest, "note": "tampered"}))
    with pytest.warns(GenguardCacheWarning, match="manifest note is not toy"):
        assert not fetch(tmp_path, KEY, build=store.build, load=store.load).from_cache


def test_an_entry_of_another_key_is_not_trusted(tmp_path: Path) -> None:
    store = Store()
    other = cache_key({"arch": "toy", "seed": 1})
    fetch(tmp_path, other, build=store.build, load=store.load)
    (tmp_path / other).rename(tmp_path / KEY)
    with pytest.raises(CacheCorrupt, match="does not describe key"):
        verify_entry(tmp_path / KEY, KEY)


def test_force_rebuilds_a_valid_entry_without_a_warning(tmp_path: Path, recwarn: pytest.WarningsRecorder) -> None:
    store = Store()
    first = fetch(tmp_path, KEY, build=store.build, load=store.load)
    forced = fetch(tmp_path, KEY, build=store.build, load=store.load, force=lambda manifest: True)
    kept = fetch(
        tmp_path, KEY, build=store.build, load=store.load, force=lambda m: m["build_id"] != forced.manifest["build_id"]
    )
    assert (first.from_cache, forced.from_cache, kept.from_cache) == (False, False, True)
    assert forced.manifest["build_id"] != first.manifest["build_id"]
    assert not [w for w in recwarn if issubclass(w.category, GenguardCacheWarning)]


def test_concurrent_requests_for_one_key_build_it_once(tmp_path: Path) -> None:
    store = Store()
    store.build_delay = 0.3
    results: list[Any] = []

    def worker() -> None:
        results.append(fetch(tmp_path, KEY, build=store.build, load=store.load))

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.builds == 1
    assert sorted(r.from_cache for r in results) == [False, True, True]


def test_the_key_is_canonical_and_changes_with_any_part() -> None:
    parts = {"arch": "gpt2", "training": {"steps": 10, "lr": 0.01}, "seed": 0}
    reordered = {"seed": 0, "training": {"lr": 0.01, "steps": 10}, "arch": "gpt2"}
    assert cache_key(parts) == cache_key(reordered)
    assert cache_key(parts) != cache_key({**parts, "training": {"steps": 11, "lr": 0.01}})
    assert len(cache_key(parts)) == 64


def test_outside_pytest_the_cache_is_the_env_var_else_the_user_cache_dir(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import platformdirs

    monkeypatch.setenv("GENGUARD_CACHE_DIR", str(tmp_path / "env"))
    assert default_cache_dir() == tmp_path / "env"
    monkeypatch.delenv("GENGUARD_CACHE_DIR")
    assert default_cache_dir() == Path(platformdirs.user_cache_dir("genguard"))


@pytest.mark.parametrize("value", ["~/genguard-cache", "absolute", None])
def test_bisect_keeps_its_environments_in_the_same_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, value: str | None
) -> None:
    from pytest_genguard.bisection.environments import cache_root

    if value is None:
        monkeypatch.delenv("GENGUARD_CACHE_DIR", raising=False)
    else:
        monkeypatch.setenv("GENGUARD_CACHE_DIR", str(tmp_path) if value == "absolute" else value)
    assert cache_root() == default_cache_dir()
    assert "~" not in str(cache_root())  # a quoted ~ is the home folder, not a folder named ~ in the working directory


@pytest.mark.parametrize("setup", ["ini", "pytest_cache", "no_cacheprovider"])
def test_inside_pytest_the_cache_is_the_ini_dir_else_pytests_cache_else_the_env_var(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, setup: str
) -> None:
    monkeypatch.setenv("GENGUARD_CACHE_DIR", str(pytester.path / "from_env"))
    args: list[str] = []
    if setup == "ini":
        pytester.makeini("[pytest]\ngenguard_cache_dir = models\n")
        expected = pytester.path / "models"
    elif setup == "pytest_cache":
        expected = pytester.path / ".pytest_cache" / "d" / "genguard"
    else:
        args += ["-p", "no:cacheprovider"]
        expected = pytester.path / "from_env"
    config = pytester.parseconfigure(*args)
    assert cache_dir_for(config) == expected
