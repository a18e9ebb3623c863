"""`assert genguard_engine(name).record(model_dir, reference=trace) == genguard_snapshot`: an engine judged by the
transformers snapshot through the snapshot fixture, failing like any other snapshot; a missing engine skips."""

from __future__ import annotations

import pytest
from snapshot_support import QUIET, snapshot_path

import pytest_genguard

pytest.importorskip("ctranslate2", reason='the engine tests need pip install "/path/to/pytest-genguard[ctranslate2]"')

SERVED = """
import json
import shutil
from pathlib import Path

import pytest

import pytest_genguard

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    folder = tmp_path_factory.mktemp("saved")
    pytest_genguard.tiny_model("gpt2").save_pretrained(folder)
    pytest_genguard.tiny_tokenizer().save_pretrained(folder)
    return folder


def test_served(genguard_engine, saved, genguard_snapshot):
    engine = genguard_engine("ctranslate2")
    model, tok = pytest_genguard.tiny_model("gpt2"), pytest_genguard.tiny_tokenizer()
    tested = pytest_genguard.record(model, tok, ["the quick", "once upon a"], max_new_tokens=12, top_k=5)
    assert tested == genguard_snapshot(name="transformers")
    converted = None
    if (HERE / "epsilon").exists():  # a conversion bug: the converted model's layer-norm epsilon changed
        converted = HERE / "converted"
        shutil.copytree(engine.convert(saved), converted, dirs_exist_ok=True)
        config = json.loads((converted / "config.json").read_text())
        config["layer_norm_epsilon"] = 1e-3
        (converted / "config.json").write_text(json.dumps(config))
    assert engine.record(saved, reference=tested, converted=converted) == genguard_snapshot(name="transformers")
"""


@pytest.fixture
def served(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    pytester.makepyfile(test_served=SERVED)
    pytester.makeini("[pytest]\ngenguard_cache_dir = models\n")
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)
    return pytester


def test_an_engine_is_judged_by_the_transformers_snapshot(served: pytest.Pytester) -> None:
    # The transformers snapshot, as --snapshot-update would write it (recorded here: one inner run less).
    tested = pytest_genguard.record(
        pytest_genguard.tiny_model("gpt2"),
        pytest_genguard.tiny_tokenizer(),
        ["the quick", "once upon a"],
        max_new_tokens=12,
        top_k=5,
    )
    snapshot = snapshot_path(served, "test_served[transformers]", module="test_served")
    snapshot.parent.mkdir(parents=True)
    snapshot.write_text(tested.to_json(), encoding="utf-8")
    (served.path / "epsilon").touch()
    broken = served.runpytest_subprocess(*QUIET, "-p", "no:randomly", "-vv")
    broken.assert_outcomes(failed=1)
    broken.stdout.fnmatch_lines(
        [
            "*regression: prompt 0 'the quick' drifts at step 0*",
            "*recorded on transformers, now ctranslate2 *",
            "*fix: if the new behaviour is intended: pytest --snapshot-update*",
        ]
    )
    broken.stdout.fnmatch_lines(["snapshots: 1 matched, 0 tolerated divergences, 0 stale, 1 regressed"])
    assert snapshot.read_text(encoding="utf-8") == tested.to_json()  # a regression never rewrites the snapshot
    (served.path / "epsilon").unlink()
    served.runpytest_subprocess(*QUIET, "-p", "no:randomly").assert_outcomes(passed=1)  # the right conversion holds


def test_a_missing_engine_skips_with_its_install_command(served: pytest.Pytester) -> None:
    served.makeconftest("import sys\nsys.modules['ctranslate2'] = None  # as if the extra were not installed\n")
    result = served.runpytest_subprocess(*QUIET, "-p", "no:randomly", "-rs", "--snapshot-update")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(
        ['*SKIPPED*genguard engine *ctranslate2* pip install "*[[]ctranslate2[]]" (the clone genguard was installed*']
    )
