"""Environment-keyed baselines: which environment's snapshot a trace is compared with, and where each one lives.

`pick_baseline` falls back to the nearest baseline (same class; same device type and dtype, nearest GPU capability;
same dtype; else the shared snapshot); `per_env_location` puts an environment's baseline under
``__genguard_baselines__/<class>/`` beside ``__snapshots__``: syrupy deletes files inside ``__snapshots__`` that no
extension of the run claims, so baselines there would not survive a shared-mode ``--snapshot-update``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import snapshot_support
from hypothesis import given, strategies as st

from pytest_genguard.core.trace import GenerationTrace
from pytest_genguard.plugin.stores import available_baselines, per_env_location, pick_baseline, resolve_baseline


@pytest.mark.parametrize(
    ("env_class", "available", "expected"),
    [
        ("cpu-float32", ["cpu-float32", "cpu-bfloat16"], "cpu-float32"),
        ("cuda-sm90-bfloat16", ["cuda-sm90-bfloat16", "cuda-sm89-bfloat16"], "cuda-sm90-bfloat16"),
        ("cuda-sm90-bfloat16", ["cuda-sm80-bfloat16", "cuda-sm89-bfloat16", "cpu-bfloat16"], "cuda-sm89-bfloat16"),
        ("cuda-sm88-bfloat16", ["cuda-sm86-bfloat16", "cuda-sm90-bfloat16"], "cuda-sm90-bfloat16"),  # tie: higher
        ("cuda-sm90-bfloat16", ["cuda-sm90-float32", "cpu-bfloat16"], "cpu-bfloat16"),  # dtype beats device
        ("cuda-sm90-float32", ["cpu-bfloat16", "cpu-float32", "cuda-sm90-float16"], "cpu-float32"),
        ("cpu-float16", ["cuda-sm80-float16", "cuda-sm90-float16"], "cuda-sm80-float16"),  # alphabetical
        ("cpu-bfloat16", ["cpu-float32", "cuda-sm90-float32"], None),  # nothing near: the shared snapshot
        ("cpu-float32", [], None),
        # the CUDA toolkit: the same GPU's baseline of the same toolkit first, then another toolkit's, then a
        # baseline recorded before the toolkit was part of the class
        ("cuda13.0-sm90-bfloat16", ["cuda12.6-sm90-bfloat16", "cuda13.0-sm90-bfloat16"], "cuda13.0-sm90-bfloat16"),
        ("cuda13.0-sm90-bfloat16", ["cuda12.6-sm90-bfloat16", "cuda13.0-sm80-bfloat16"], "cuda12.6-sm90-bfloat16"),
        ("cuda13.0-sm90-bfloat16", ["cuda12.6-sm89-bfloat16", "cuda13.0-sm89-bfloat16"], "cuda13.0-sm89-bfloat16"),
        ("cuda13.0-sm90-bfloat16", ["cuda-sm90-bfloat16", "cpu-bfloat16"], "cuda-sm90-bfloat16"),
        ("cpu-float32", ["notes", "cpu_float32", "README.md", "cpu-float32-old"], None),  # not environment classes
    ],
)
def test_the_nearest_baseline_is_picked(env_class: str, available: list[str], expected: str | None) -> None:
    assert pick_baseline(env_class, available) == expected


def test_picking_for_something_that_is_not_an_environment_class_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"'float32' is not an environment class \(e.g. 'cpu-float32'\)"):
        pick_baseline("float32", ["cpu-float32"])


DEVICES = st.sampled_from(["cpu", "cuda", "mps"])
DTYPES = st.sampled_from(["float32", "bfloat16", "float16"])


@st.composite
def env_classes(draw: st.DrawFn) -> str:
    device, dtype = draw(DEVICES), draw(DTYPES)
    if device == "cuda":
        toolkit = draw(st.sampled_from(["", "12.6", "13.0"]))
        return f"cuda{toolkit}-sm{draw(st.sampled_from([70, 75, 80, 86, 89, 90, 100]))}-{dtype}"
    return f"{device}-{dtype}"


def _device_type(env_class: str) -> str:
    """'cuda' of 'cuda12.6-sm90-bfloat16': the device type without the CUDA toolkit."""
    return env_class.split("-", 1)[0].rstrip("0123456789.")


@given(env_classes(), st.lists(env_classes(), max_size=8))
def test_a_picked_baseline_is_available_shares_the_dtype_and_is_never_farther_than_another(
    env_class: str, available: list[str]
) -> None:
    picked = pick_baseline(env_class, available)
    dtype = env_class.rsplit("-", 1)[1]
    same_dtype = [a for a in available if a.endswith(f"-{dtype}")]
    if picked is None:
        assert not same_dtype
        return
    assert picked in available and picked.endswith(f"-{dtype}")
    if env_class in available:
        assert picked == env_class
    device = _device_type(env_class)
    rivals = [a for a in same_dtype if _device_type(a) == device]
    if rivals:
        assert _device_type(picked) == device
    if device == "cuda" and rivals:
        distance = [abs(int(a.split("-")[1][2:]) - int(env_class.split("-")[1][2:])) for a in (picked, *rivals)]
        assert distance[0] == min(distance)
        same_gpu = [a for a in rivals if a.split("-")[1] == picked.split("-")[1]]
        toolkit = env_class.split("-", 1)[0]
        if any(a.split("-", 1)[0] == toolkit for a in same_gpu):  # the same GPU: the same toolkit first
            assert picked.split("-", 1)[0] == toolkit
    assert pick_baseline(env_class, list(reversed(available))) == picked  # order of listing does not matter


def test_a_per_environment_baseline_lives_beside_the_snapshots_in_a_folder_named_for_its_class() -> None:
    shared = Path("tests/__snapshots__/test_gen/test_greedy.genguard")
    assert per_env_location(shared, "cuda-sm90-bfloat16") == Path(
        "tests/__genguard_baselines__/cuda-sm90-bfloat16/test_gen/test_greedy.genguard"
    )
    with pytest.raises(ValueError, match="is not an environment class"):
        per_env_location(shared, "../escape")


def test_resolving_reads_the_nearest_existing_baseline_else_the_shared_snapshot(tmp_path: Path) -> None:
    shared = tmp_path / "__snapshots__" / "test_gen" / "test_a.genguard"
    assert available_baselines(shared) == []
    assert resolve_baseline(shared, "cpu-float32") == (shared, None)
    for env_class in ("cuda-sm80-bfloat16", "cpu-float32"):
        path = per_env_location(shared, env_class)
        path.parent.mkdir(parents=True)
        path.write_text("{}")
    per_env_location(shared, "cuda-sm90-bfloat16").parent.mkdir(parents=True)  # no file for this test: no baseline
    per_env_location(shared.parent / "test_b.genguard", "cpu-float16").parent.mkdir(parents=True)
    per_env_location(shared.parent / "test_b.genguard", "cpu-float16").write_text("{}")  # another test's baseline
    assert available_baselines(shared) == ["cpu-float32", "cuda-sm80-bfloat16"]
    assert resolve_baseline(shared, "cuda-sm90-bfloat16") == (
        per_env_location(shared, "cuda-sm80-bfloat16"),
        "cuda-sm80-bfloat16",
    )
    assert resolve_baseline(shared, "cpu-float32") == (per_env_location(shared, "cpu-float32"), "cpu-float32")
    assert resolve_baseline(shared, "cpu-float16") == (shared, None)


TEST_FILE = """
from pytest_genguard.core.trace import GenerationTrace, PromptTrace, Step

def test_a(genguard_snapshot):
    step = Step(10, " the", -0.5, -0.5, (10, 11), (-0.5, -2.0))
    trace = GenerationTrace(prompts=(PromptTrace("hello", (1, 2), (step,), "length", " the"),),
                            settings={"mode": "greedy"}, environment={"device_type": "cpu", "dtype": "float32"})
    assert trace == genguard_snapshot
"""


def test_shared_mode_snapshot_updates_leave_per_environment_baselines_alone(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # under -n 2, syrupy would take the inner run for a worker
    pytester.makepyfile(test_gen=TEST_FILE)
    pytester.runpytest("-p", "no:cacheprovider", "--snapshot-update").assert_outcomes(passed=1)
    shared = pytester.path / "__snapshots__" / "test_gen" / "test_a.genguard"
    text = shared.read_text(encoding="utf-8")
    baselines = [per_env_location(shared, c) for c in ("cpu-float32", "cuda-sm90-bfloat16")]
    # A .genguard file where no test's snapshot can be: syrupy's default extension used to claim it as an orphan
    # and delete it; since genguard hides its files from the other extensions (pytest_genguard/keep.py), it stays.
    inside = shared.parent / "cpu-float32" / shared.name
    for path in [*baselines, inside]:
        path.parent.mkdir(parents=True)
        path.write_text(text, encoding="utf-8")
    plain = pytester.runpytest("-p", "no:cacheprovider")
    plain.assert_outcomes(passed=1)
    assert "unused" not in plain.stdout.str()
    pytester.runpytest("-p", "no:cacheprovider", "--snapshot-update").assert_outcomes(passed=1)
    assert all(path.read_text(encoding="utf-8") == text for path in [*baselines, inside])
    assert shared.read_text(encoding="utf-8") == text


# ------------------------------------------------------------------------------------------------ end to end
# `--genguard-baselines per-env` through the genguard_snapshot fixture: hand-made traces
# (tests/support/snapshot_support.py)
# whose environment a variant can set, and a hook that writes every genguard event of the inner run to events.jsonl.

SHARED_ENV = 'environment={**ENVIRONMENT, "dtype": v.get("dtype", "float32"), **v.get("environment", {})}'
assert SHARED_ENV in snapshot_support.CONFTEST  # the hand-made trace this module varies
PER_ENV_CONFTEST = (
    snapshot_support.CONFTEST.replace(SHARED_ENV, 'environment=v.get("environment", ENVIRONMENT)')
    + """

import os


def pytest_runtest_logreport(report):
    if "PYTEST_XDIST_WORKER" in os.environ:  # under -n 2 the controller sees every report too: write once
        return
    for name, value in report.user_properties:
        if name == "genguard":
            with (HERE / "events.jsonl").open("a") as handle:
                for event in value:
                    handle.write(json.dumps(event) + "\\n")
"""
)
PER_ENV = ("--genguard-baselines", "per-env")
BF16 = {"environment": {"device_type": "cpu", "dtype": "bfloat16"}}


def per_env_setup(pytester: pytest.Pytester, **variants: dict[str, Any]) -> None:
    pytester.makeconftest(PER_ENV_CONFTEST)
    pytester.makepyfile(test_gen=snapshot_support.ONE_TEST)
    snapshot_support.set_variants(pytester, **variants)


def events(pytester: pytest.Pytester) -> list[dict[str, Any]]:
    """The snapshot events of the inner runs since the last call."""
    path = pytester.path / "events.jsonl"
    if not path.exists():
        return []
    found = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    path.unlink()
    return [e for e in found if e["kind"] == "snapshot"]


def baseline(pytester: pytest.Pytester, env_class: str) -> Path:
    return per_env_location(snapshot_support.snapshot_path(pytester, "test_greedy"), env_class)


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


@snapshot_support.XDIST
def test_per_env_records_only_this_environments_baseline_and_never_rewrites_a_matching_one(
    pytester: pytest.Pytester, xdist: list[str]
) -> None:
    per_env_setup(pytester)
    missing = snapshot_support.run(pytester, *PER_ENV)
    missing.assert_outcomes(failed=1)
    missing.stdout.fnmatch_lines(
        [
            "*genguard snapshot 'test_greedy' has no cpu-float32 baseline (__genguard_baselines__/cpu-float32/"
            "test_gen/test_greedy.genguard) and nothing to fall back to (no baseline of the same dtype, no shared "
            "snapshot __snapshots__/test_gen/test_greedy.genguard); record the cpu-float32 baseline with: pytest "
            "--genguard-baselines per-env --snapshot-update test_gen.py::test_greedy"
        ]
    )
    assert [(e["verdict"], e["baseline"]) for e in events(pytester)] == [("missing", None)]

    created = snapshot_support.run(pytester, *PER_ENV, "--snapshot-update", *xdist)
    created.assert_outcomes(passed=1)
    created.stdout.fnmatch_lines(["snapshots: 0 matched, *1 created", "1 snapshot passed."])
    own = baseline(pytester, "cpu-float32")
    assert files_under(pytester.path / "__genguard_baselines__") == ["cpu-float32/test_gen/test_greedy.genguard"]
    assert not (pytester.path / "__snapshots__").exists()  # the shared snapshot is not written in per-env mode
    assert GenerationTrace.from_json(own.read_text(encoding="utf-8")).prompts[0].token_ids == (10, 20, 30)
    [event] = events(pytester)
    assert (event["verdict"], event["baseline"], event["baseline_file"]) == (
        "created",
        "cpu-float32",
        "__genguard_baselines__/cpu-float32/test_gen/test_greedy.genguard",
    )

    snapshot_support.age(own)
    before = snapshot_support.file_state(own)
    snapshot_support.set_variants(pytester, test_greedy={"drift": 1e-7})  # within fp32 tolerance
    matched = snapshot_support.run(pytester, *PER_ENV, "--snapshot-update", *xdist)
    matched.assert_outcomes(passed=1)
    # syrupy counts the assertion against the shared snapshot's name, read-only: passed, never written or missing
    matched.stdout.fnmatch_lines(
        ["snapshots: 1 matched, 0 tolerated divergences, 0 stale, 0 regressed", "1 snapshot passed."]
    )
    assert snapshot_support.file_state(own) == before
    assert [(e["verdict"], e["baseline"]) for e in events(pytester)] == [("within tolerance", "cpu-float32")]


def test_a_regression_against_this_environments_baseline_fails_naming_it_and_update_rewrites_only_it(
    pytester: pytest.Pytester,
) -> None:
    per_env_setup(pytester)
    snapshot_support.run(pytester, *PER_ENV, "--snapshot-update").assert_outcomes(passed=1)
    own = baseline(pytester, "cpu-float32")
    snapshot_support.age(own)
    before = snapshot_support.file_state(own)
    snapshot_support.set_variants(pytester, test_greedy={"flip": "genuine"})
    events(pytester)
    failed = snapshot_support.run(pytester, *PER_ENV)
    failed.assert_outcomes(failed=1)
    failed.stdout.fnmatch_lines(
        [
            "E  *regression: prompt 0 'hello' diverges at step 2*",
            "E  *compared with the cpu-float32 baseline __genguard_baselines__/cpu-float32/test_gen/"
            "test_greedy.genguard",
        ]
    )
    assert snapshot_support.file_state(own) == before
    [event] = events(pytester)
    assert (event["verdict"], event["failure"], event["baseline"]) == ("regression", True, "cpu-float32")
    fix = "fix: if the new behaviour is intended: pytest --genguard-baselines per-env --snapshot-update test_gen.py::"
    assert f"{fix}test_greedy" in event["detail"]  # plain --snapshot-update would rewrite the shared snapshot

    updated = snapshot_support.run(pytester, *PER_ENV, "--snapshot-update")
    updated.assert_outcomes(passed=1)
    updated.stdout.fnmatch_lines(["snapshots: 0 matched, *1 updated"])
    assert GenerationTrace.from_json(own.read_text(encoding="utf-8")).prompts[0].token_ids == (10, 20, 32)
    assert files_under(pytester.path / "__genguard_baselines__") == ["cpu-float32/test_gen/test_greedy.genguard"]
    assert not (pytester.path / "__snapshots__").exists()


@snapshot_support.XDIST
def test_with_only_a_shared_snapshot_per_env_falls_back_to_it_and_update_keeps_it_byte_identical(
    pytester: pytest.Pytester, xdist: list[str]
) -> None:
    per_env_setup(pytester)
    snapshot_support.run(pytester, "--snapshot-update").assert_outcomes(passed=1)  # shared mode records the shared
    shared = snapshot_support.snapshot_path(pytester, "test_greedy")
    removed = shared.parent / "test_removed.genguard"  # a test that no longer exists: syrupy must still clean it up
    removed.write_bytes(shared.read_bytes())
    snapshot_support.age(shared)
    before = snapshot_support.file_state(shared)
    events(pytester)

    fallback = snapshot_support.run(pytester, *PER_ENV, "--snapshot-warn-unused")
    fallback.assert_outcomes(passed=1)
    [event] = events(pytester)
    assert (event["verdict"], event["baseline"], event["baseline_file"]) == (
        "identical",
        "shared fallback",
        "__snapshots__/test_gen/test_greedy.genguard",
    )
    assert (
        "compared with the shared snapshot __snapshots__/test_gen/test_greedy.genguard (fallback: no cpu-float32 "
        "baseline yet)" in event["detail"]
    )
    assert not (pytester.path / "__genguard_baselines__").exists()

    snapshot_support.set_variants(pytester, test_greedy={"flip": "genuine"})
    regressed = snapshot_support.run(pytester, *PER_ENV, "--snapshot-warn-unused")
    regressed.assert_outcomes(failed=1)
    regressed.stdout.fnmatch_lines(
        [
            "E  *compared with the shared snapshot __snapshots__/test_gen/test_greedy.genguard (fallback: no "
            "cpu-float32 baseline yet)"
        ]
    )
    snapshot_support.set_variants(pytester)
    events(pytester)

    updated = snapshot_support.run(pytester, *PER_ENV, "--snapshot-update", *xdist)
    updated.assert_outcomes(passed=1)
    updated.stdout.fnmatch_lines(["snapshots: 0 matched, *1 created", "*1 unused snapshot deleted*"])
    assert snapshot_support.file_state(shared) == before  # the fallback was neither rewritten nor deleted as unused
    assert not removed.exists()  # negative control: an untracked shared file is deleted by the same run
    assert files_under(pytester.path / "__genguard_baselines__") == ["cpu-float32/test_gen/test_greedy.genguard"]
    assert baseline(pytester, "cpu-float32").read_bytes() == shared.read_bytes()
    [event] = events(pytester)
    assert event["verdict"] == "created"
    assert "(the cpu-float32 baseline; was: identical against the shared snapshot" in event["detail"]


def test_a_stale_fallback_is_rerecorded_as_this_environments_baseline_by_update_stale(
    pytester: pytest.Pytester,
) -> None:
    per_env_setup(pytester)
    snapshot_support.run(pytester, "--snapshot-update").assert_outcomes(passed=1)
    shared = snapshot_support.snapshot_path(pytester, "test_greedy")
    snapshot_support.age(shared)
    before = snapshot_support.file_state(shared)
    snapshot_support.set_variants(pytester, test_greedy={"weights": "b"})
    stale = snapshot_support.run(pytester, *PER_ENV)
    stale.assert_outcomes(failed=1)
    stale.stdout.fnmatch_lines(
        ["E  *stale: model changed: *re-record with: pytest --genguard-baselines per-env --genguard-update-stale *"]
    )
    snapshot_support.run(pytester, *PER_ENV, "--genguard-update-stale").assert_outcomes(passed=1)
    assert snapshot_support.file_state(shared) == before
    assert '"weights_hash": "bbbb' in baseline(pytester, "cpu-float32").read_text(encoding="utf-8")
    events(pytester)
    snapshot_support.run(pytester, *PER_ENV).assert_outcomes(passed=1)  # now against its own baseline
    assert [(e["verdict"], e["baseline"]) for e in events(pytester)] == [("identical", "cpu-float32")]


def test_a_bfloat16_trace_uses_its_own_baseline_else_the_nearest_then_the_shared_snapshot(
    pytester: pytest.Pytester,
) -> None:
    per_env_setup(pytester, test_greedy=BF16)
    snapshot_support.run(pytester, "--snapshot-update").assert_outcomes(passed=1)
    shared = snapshot_support.snapshot_path(pytester, "test_greedy")
    good = shared.read_text(encoding="utf-8")
    snapshot_support.set_variants(pytester, test_greedy={**BF16, "flip": "genuine"})
    snapshot_support.run(pytester, "--snapshot-update").assert_outcomes(passed=1)
    bad = shared.read_text(encoding="utf-8")  # a baseline this trace regresses against
    shared.write_text(good, encoding="utf-8")
    snapshot_support.set_variants(pytester, test_greedy=BF16)
    for env_class, text in [
        ("cpu-bfloat16", good),
        ("cuda-sm90-bfloat16", good),
        ("cuda-sm80-float32", bad),  # another dtype: never a fallback for a bfloat16 trace
        ("cpu-float32", bad),
    ]:
        path = baseline(pytester, env_class)
        path.parent.mkdir(parents=True)
        path.write_text(text, encoding="utf-8")
    events(pytester)
    used = []
    for remove in ("cpu-bfloat16", "cuda-sm90-bfloat16", None):
        snapshot_support.run(pytester, *PER_ENV).assert_outcomes(passed=1)
        [event] = events(pytester)
        used.append((event["environment_class"], event["baseline"], event["baseline_file"]))
        if remove:
            baseline(pytester, remove).unlink()
    assert used == [
        ("cpu-bfloat16", "cpu-bfloat16", "__genguard_baselines__/cpu-bfloat16/test_gen/test_greedy.genguard"),
        (
            "cpu-bfloat16",
            "cuda-sm90-bfloat16",
            "__genguard_baselines__/cuda-sm90-bfloat16/test_gen/test_greedy.genguard",
        ),
        ("cpu-bfloat16", "shared fallback", "__snapshots__/test_gen/test_greedy.genguard"),
    ]
    baseline(pytester, "cpu-float32").write_text(good, encoding="utf-8")  # skipped by the bfloat16 trace,
    snapshot_support.set_variants(pytester)  # picked for a float32 trace
    snapshot_support.run(pytester, *PER_ENV).assert_outcomes(passed=1)
    assert [e["baseline"] for e in events(pytester)] == ["cpu-float32"]


def test_a_trace_whose_environment_cannot_key_a_baseline_is_an_error_naming_what_is_missing(
    pytester: pytest.Pytester,
) -> None:
    per_env_setup(pytester, test_greedy={"environment": {"device_type": "cuda", "dtype": "float16"}})
    result = snapshot_support.run(pytester, *PER_ENV)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "E  *ValueError: --genguard-baselines per-env: genguard snapshot 'test_greedy': the trace's environment "
            "gives the class 'cuda-sm-float16', which cannot key a baseline (it needs trace.environment's "
            "device_type, dtype and, on CUDA, gpu_capability*"
        ]
    )


@pytest.fixture(scope="module")
def warm_imports() -> None:
    """Load what recording, verifying and the recorder import in this process first: pytester's in-process runs
    drop the modules they import, and torch cannot be imported twice (a second import crashes the interpreter)."""
    import pytest_genguard
    import pytest_genguard.hf.recorder

    tokenizer = pytest_genguard.tiny_tokenizer()
    model = pytest_genguard.tiny_model("gpt2")
    trace = pytest_genguard.record(model, tokenizer, ["a"], max_new_tokens=2)
    assert pytest_genguard.verify(model, tokenizer, trace)


@pytest.mark.usefixtures("warm_imports")
def test_a_recorder_history_is_keyed_by_the_environment_of_its_checkpoints(pytester: pytest.Pytester) -> None:
    per_env_setup(pytester, test_greedy=BF16)
    pytester.makepyfile(
        test_gen="""
        from conftest import make_trace
        from pytest_genguard.hf.recorder import Checkpoint, RecorderHistory

        def test_history(genguard_snapshot):
            trace = make_trace("test_greedy")
            history = RecorderHistory([Checkpoint(n, None, 2.0, "step", trace) for n in (1, 2)])
            assert history == genguard_snapshot
        """
    )
    snapshot_support.run(pytester, *PER_ENV, "--snapshot-update").assert_outcomes(passed=1)
    assert files_under(pytester.path / "__genguard_baselines__") == ["cpu-bfloat16/test_gen/test_history.genguard"]
    snapshot_support.run(pytester, *PER_ENV).assert_outcomes(passed=1)
    assert [(e["verdict"], e["baseline"]) for e in events(pytester)] == [
        ("created", "cpu-bfloat16"),
        ("identical", "cpu-bfloat16"),
    ]


VERIFIED = (
    """
from pathlib import Path

import pytest
import torch

import pytest_genguard

HERE = Path(__file__).parent

"""
    + snapshot_support.PERTURBABLE_MODEL
    + """

def test_verified(genguard_snapshot, model):
    genguard_snapshot.verify(model, pytest_genguard.tiny_tokenizer(), ["the quick"], max_new_tokens=4)
"""
)


@pytest.mark.usefixtures("warm_imports")
def test_verify_checks_the_baseline_of_the_models_environment_and_rerecords_only_that_one(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(PER_ENV_CONFTEST)
    pytester.makepyfile(test_gen=VERIFIED)
    snapshot_support.run(pytester, "--snapshot-update").assert_outcomes(passed=1)
    shared = snapshot_support.snapshot_path(pytester, "test_verified")
    snapshot_support.age(shared)
    before = snapshot_support.file_state(shared)
    snapshot_support.perturb(pytester.path)
    events(pytester)
    stale = snapshot_support.run(pytester, *PER_ENV)
    stale.assert_outcomes(failed=1)
    stale.stdout.fnmatch_lines(
        [
            "E  *AssertionError: stale: model changed: weights *; if intended, re-record with: pytest "
            "--genguard-baselines per-env --genguard-update-stale test_gen.py::test_verified",
            "E  *compared with the shared snapshot __snapshots__/test_gen/test_verified.genguard (fallback: no "
            "cpu-float32 baseline yet)",
        ]
    )
    assert [(e["verdict"], e["baseline"], e["via"]) for e in events(pytester)] == [
        ("stale", "shared fallback", "verify")
    ]
    snapshot_support.run(pytester, *PER_ENV, "--genguard-update-stale").assert_outcomes(passed=1)
    assert snapshot_support.file_state(shared) == before
    own = per_env_location(shared, "cpu-float32")
    assert files_under(pytester.path / "__genguard_baselines__") == ["cpu-float32/test_gen/test_verified.genguard"]
    assert [e["verdict"] for e in events(pytester)] == ["created"]
    snapshot_support.age(own)
    own_before = snapshot_support.file_state(own)
    snapshot_support.run(pytester, *PER_ENV).assert_outcomes(passed=1)  # now its own baseline, left unchanged
    [event] = events(pytester)  # teacher forcing reproduces recorded logprobs within tolerance, not bitwise
    assert (event["verdict"], event["baseline"]) in {("identical", "cpu-float32"), ("within tolerance", "cpu-float32")}
    assert snapshot_support.file_state(own) == own_before
