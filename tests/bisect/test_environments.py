"""Probe environments, built for real with uv from local wheels (no index, no network): one release of the bisected
package in the environment, every other package from this one (layered), requirements this one lacks installed."""

import base64
import hashlib
import json
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from pytest_genguard.bisection.environments import (
    LAYER,
    READY,
    Environments,
    InstallError,
    PackageSources,
    base_site_dirs,
    unsatisfied,
)

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "iniconfig"  # a small package pytest installs here: the probe environment must shadow it with its own


def make_wheel(folder: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> Path:
    """A pure-Python wheel of `name` whose module says which release it is (``RELEASE``)."""
    module = name.replace("-", "_")
    dist_info = f"{module}-{version}.dist-info"
    metadata_lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    metadata_lines += [f"Requires-Dist: {r}" for r in requires]
    wheel_lines = ["Wheel-Version: 1.0", "Generator: genguard-test", "Root-Is-Purelib: true", "Tag: py3-none-any"]
    files = {
        f"{module}/__init__.py": f"RELEASE = {version!r}\n",
        f"{dist_info}/METADATA": "".join(line + "\n" for line in metadata_lines),
        f"{dist_info}/WHEEL": "".join(line + "\n" for line in wheel_lines),
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    record.append(f"{dist_info}/RECORD,,")
    files[f"{dist_info}/RECORD"] = "\n".join(record) + "\n"
    wheel = folder / f"{module}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return wheel


@pytest.fixture
def wheels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    # uv links installed files from its cache: a cache of this test's own keeps the fake wheels out of the user's
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    folder = tmp_path / "wheels"
    folder.mkdir()
    make_wheel(folder, PACKAGE, "0.0.1", requires=("pluggy>=1.0", "colorama; sys_platform == 'nowhere'"))
    make_wheel(folder, PACKAGE, "0.0.2", requires=("genguard-layer-dep>=2",))
    make_wheel(folder, "genguard-layer-dep", "2.0")
    make_wheel(folder, PACKAGE, "0.0.3", requires=("genguard-nowhere>=1",))
    make_wheel(folder, PACKAGE, "0.0.4", requires=("genguard-layer-dep[more]>=2",))  # as torch needs cuda-toolkit[...]
    make_wheel(folder, "genguard-layer-dep", "2.1", requires=("genguard-extra-only>=1; extra == 'more'",))
    make_wheel(folder, "genguard-extra-only", "1.0")
    return folder


def environments(wheels: Path, tmp_path: Path) -> Environments:
    return Environments(PACKAGE, PackageSources(find_links=(str(wheels),), no_index=True), tmp_path / "envs")


def run(python: Path, code: str) -> dict:
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True, cwd="/")
    return json.loads(done.stdout)


SEEN = """
import json, importlib.metadata as m, iniconfig, pluggy, pytest_genguard
print(json.dumps({"release": iniconfig.RELEASE, "version": m.version("iniconfig"), "file": iniconfig.__file__,
                  "genguard": pytest_genguard.__file__, "pluggy": pluggy.__file__}))
"""


def test_a_probe_environment_holds_the_release_and_takes_everything_else_from_this_one(wheels, tmp_path):
    envs = environments(wheels, tmp_path)
    python, reused = envs.ensure("0.0.1")
    assert not reused and python.parent.parent.parent == tmp_path / "envs"
    seen = run(python, SEEN)
    assert seen["release"] == "0.0.1" and seen["version"] == "0.0.1"  # the probed release shadows this one's
    assert seen["file"].startswith(str(tmp_path / "envs"))
    assert Path(seen["genguard"]).resolve() == ROOT / "pytest_genguard" / "__init__.py"  # editable, as installed here
    assert any(seen["pluggy"].startswith(folder) for folder in base_site_dirs())  # requirement met by this env
    site = next((tmp_path / "envs").glob("*/lib/python*/site-packages"))
    assert sorted(p.name for p in site.glob("pluggy*")) == []  # nothing but the release itself was installed
    assert (site / f"{LAYER}.pth").is_file()
    assert envs.ensure("0.0.1") == (python, True)  # cached: reused as it is


def test_a_requirement_this_environment_lacks_goes_into_the_probe_environment(wheels, tmp_path):
    python, _ = environments(wheels, tmp_path).ensure("0.0.2")
    code = "import json, genguard_layer_dep as dep, iniconfig; print(json.dumps([iniconfig.RELEASE, dep.RELEASE]))"
    assert run(python, code) == ["0.0.2", "2.1"]  # the newest that fits, as pip would pick


def test_a_requirement_with_extras_brings_what_its_extras_need(wheels, tmp_path):
    python, _ = environments(wheels, tmp_path).ensure("0.0.4")
    code = "import json, genguard_layer_dep as d, genguard_extra_only as x; print(json.dumps([d.RELEASE, x.RELEASE]))"
    assert run(python, code) == ["2.1", "1.0"]


def test_a_release_whose_requirements_cannot_be_installed_is_an_install_error_and_leaves_nothing(wheels, tmp_path):
    envs = environments(wheels, tmp_path)
    with pytest.raises(InstallError, match=f"{PACKAGE} 0.0.3 does not install") as caught:
        envs.ensure("0.0.3")
    assert "genguard-nowhere" in str(caught.value)
    assert not (tmp_path / "envs" / envs.key("0.0.3")).exists()
    with pytest.raises(InstallError, match=f"{PACKAGE} 9.9.9 does not install"):
        envs.ensure("9.9.9")  # no such release


def test_the_release_installed_here_is_probed_in_this_interpreter(wheels, tmp_path):
    envs = environments(wheels, tmp_path)
    assert envs.ensure(metadata.version(PACKAGE)) == (Path(sys.executable), True)
    assert not (tmp_path / "envs").exists()  # no environment built


def test_a_cached_environment_this_one_has_outgrown_is_rebuilt(wheels, tmp_path):
    envs = environments(wheels, tmp_path)
    python, _ = envs.ensure("0.0.1")
    marker = python.parent.parent / READY
    dist = next(python.parent.parent.glob("lib/python*/site-packages/iniconfig-0.0.1.dist-info"))
    text = (dist / "METADATA").read_text()
    (dist / "METADATA").unlink()  # a new file, not the one uv linked from its cache
    (dist / "METADATA").write_text(text + "Requires-Dist: genguard-layer-dep>=2\n")
    assert marker.exists()
    assert envs.ensure("0.0.1") == (python, False)  # rebuilt: its requirements are no longer met here
    assert "genguard-layer-dep" not in (dist / "METADATA").read_text()


def test_unsatisfied_requirements_skip_extras_and_other_platforms():
    here = base_site_dirs()
    requirements = [
        "pytest>=1",
        "pytest<1",
        "genguard-nowhere>=1",
        "numpy; extra == 'torch'",
        "colorama; sys_platform == 'nowhere'",
        "not a requirement ((",
    ]
    assert unsatisfied(requirements, here) == ["pytest<1", "genguard-nowhere>=1"]
