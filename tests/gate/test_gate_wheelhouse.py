"""What the host makes for the image: the requirements kept from pip's report (torch and what only torch needs are
the base's), a wheel of the running genguard repacked from its installed files (checked against its RECORD), and the
requirements a wheel declares."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from pytest_genguard.gate.errors import GateError
from pytest_genguard.gate.project import load_project
from pytest_genguard.gate.wheelhouse import kept_items, repacked_wheel, wheel_requirements

TEAM = Path(__file__).resolve().parents[2] / "tests" / "team_project"


def _item(name: str, requires: list[str], requested: bool = False) -> dict[str, object]:
    return {"metadata": {"name": name, "version": "1", "requires_dist": requires}, "requested": requested}


def test_the_walk_from_what_was_asked_stops_at_torch() -> None:
    items = [
        _item("transformers", ["numpy", "tokenizers>=0.22", "torch; extra == 'torch'"], requested=True),
        _item("Acme_Chat", ["torch"], requested=True),
        _item("pytest", ["pluggy"], requested=True),
        _item("torch", ["nvidia-cublas-cu12==12.6; platform_system == 'Linux'", "filelock", "sympy"], requested=True),
        _item("nvidia-cublas-cu12", []),
        _item("sympy", ["mpmath"]),
        _item("mpmath", []),
        _item("filelock", []),
        _item("numpy", []),
        _item("tokenizers", ["huggingface-hub"]),
        _item("huggingface_hub", ["filelock"]),
        _item("pluggy", []),
    ]
    kept = [str(item["metadata"]["name"]) for item in kept_items(items, load_project(TEAM))]  # type: ignore[index]
    # torch's CUDA libraries and sympy are the base's; filelock is kept, huggingface_hub needs it too.
    assert kept == ["filelock", "huggingface_hub", "numpy", "pluggy", "pytest", "tokenizers", "transformers"]


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _installed(site: Path) -> metadata.Distribution:
    """A distribution as pip installs a wheel: its files, a dist-info with RECORD, pip's own records, a script."""
    files = {
        "fakepkg/__init__.py": b"VALUE = 1\n",
        "fakepkg/data/table.txt": b"a b\n",
        "fakepkg-2.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: fakepkg\nVersion: 2.0\n"
        b"Requires-Dist: filelock>=3\nRequires-Dist: rich; extra == 'cli'\n",
        "fakepkg-2.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        "fakepkg-2.0.dist-info/INSTALLER": b"pip\n",
        "../../bin/fake": b"#!/usr/bin/python\n",
    }
    record = []
    for name, data in files.items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_bytes(data)
        record.append(f"{name},{_record_hash(data)},{len(data)}")
    (site / "fakepkg" / "__pycache__").mkdir()
    (site / "fakepkg" / "__pycache__" / "x.pyc").write_bytes(b"\0")
    record += ["fakepkg/__pycache__/x.pyc,,", "fakepkg-2.0.dist-info/RECORD,,"]
    (site / "fakepkg-2.0.dist-info" / "RECORD").write_text("\n".join(record) + "\n", encoding="utf-8")
    return metadata.PathDistribution(site / "fakepkg-2.0.dist-info")


def test_an_installed_distribution_is_repacked_into_the_wheel_it_came_from(tmp_path: Path) -> None:
    site = tmp_path / "lib" / "python3" / "site-packages"
    wheel = repacked_wheel(_installed(site), tmp_path / "out")
    assert wheel.name == "fakepkg-2.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as zf:
        names = sorted(zf.namelist())
        record = zf.read("fakepkg-2.0.dist-info/RECORD").decode()
    assert names == [
        "fakepkg-2.0.dist-info/METADATA",
        "fakepkg-2.0.dist-info/RECORD",
        "fakepkg-2.0.dist-info/WHEEL",
        "fakepkg/__init__.py",
        "fakepkg/data/table.txt",
    ]
    assert f"fakepkg/__init__.py,{_record_hash(b'VALUE = 1' + bytes([10]))},10" in record
    assert wheel_requirements(wheel) == ["filelock>=3"]  # an extra's requirement is not installed
    # The same files give the same bytes: the image's layer is reused.
    again = repacked_wheel(_installed(tmp_path / "again"), tmp_path / "out2")
    assert again.read_bytes() == wheel.read_bytes()


def test_an_installed_file_edited_since_its_wheel_is_refused(tmp_path: Path) -> None:
    site = tmp_path / "site"
    dist = _installed(site)
    (site / "fakepkg" / "__init__.py").write_text("VALUE = 2\n", encoding="utf-8")
    with pytest.raises(GateError, match="differs from what fakepkg's wheel installed"):
        repacked_wheel(dist, tmp_path / "out")
