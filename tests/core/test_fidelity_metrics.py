"""Fidelity metrics from traces alone: llama.cpp's definitions, the top-k lower bound of the KLD, budgets, the report
and `genguard fidelity` (no torch: distributions are made by hand here)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
import trace_builder

from pytest_genguard import cli
from pytest_genguard.core.budget import PRESETS, Budget, FidelityReport, budget_of, parse_budget
from pytest_genguard.core.fidelity import aggregate, bounded_step, mean_and_stderr, percentile, trace_fidelity
from pytest_genguard.core.trace import GenerationTrace, Step

VOCAB = 40


def distribution(rng: random.Random, sharpness: float) -> list[float]:
    """Log-probabilities over the toy vocabulary (sharper: more mass on fewer tokens)."""
    logits = [rng.gauss(0.0, sharpness) for _ in range(VOCAB)]
    lse = math.log(math.fsum(math.exp(x) for x in logits))
    return [x - lse for x in logits]


def kld(p: list[float], q: list[float]) -> float:
    return math.fsum(math.exp(a) * (a - b) for a, b in zip(p, q, strict=True))


def as_step(logprobs: list[float], token: int, k: int) -> Step:
    order = sorted(range(VOCAB), key=lambda i: -logprobs[i])[:k]
    lp = logprobs[token]
    return Step(token, "?", lp, lp, tuple(order), tuple(logprobs[i] for i in order))


def test_the_aggregates_follow_llama_cpp_percentile_median_and_stderr() -> None:
    values = [float(v) for v in range(1, 13)]  # 12 values: stderr is reported above 10
    assert percentile(values, 0.9) == pytest.approx(0.1 * 10 + 0.9 * 11)  # position 0.9 * 11 = 9.9
    assert percentile(values, 0.0) == 1.0 and percentile(values, 1.0) == 12.0
    mean, stderr = mean_and_stderr(values)
    assert mean == 6.5
    assert stderr == pytest.approx(math.sqrt((sum(v * v for v in values) / 12 - 6.5**2) / 11))
    assert mean_and_stderr(values[:10])[1] == 0.0  # llama.cpp reports no uncertainty for 10 values or fewer


@pytest.mark.parametrize("sharpness", [0.5, 2.0, 5.0])
def test_the_top_k_bound_never_exceeds_the_true_kld_and_reaches_it_with_the_whole_vocabulary(sharpness: float) -> None:
    rng = random.Random(int(sharpness * 10))
    for _ in range(50):
        p = distribution(rng, sharpness)
        q = [x + rng.gauss(0.0, 0.3) for x in p]
        lse = math.log(math.fsum(math.exp(x) for x in q))
        q = [x - lse for x in q]
        token = max(range(VOCAB), key=lambda i: p[i])
        true = kld(p, q)
        bounds = []
        for k in (1, 5, 20, VOCAB):
            ref, cand = as_step(p, token, k), as_step(q, token, k)
            known = dict(zip(cand.top_ids, cand.top_logprobs, strict=True))
            known.setdefault(token, cand.logprob)
            top = tuple(zip(cand.top_ids, cand.top_logprobs, strict=True))
            found = bounded_step(0, 0, ref, known, candidate_top=top)
            assert found.kld <= true + 1e-12
            bounds.append(found.kld)
        assert bounds[-1] == pytest.approx(true, rel=1e-9, abs=1e-15)  # everything known: the bound is the value
        # the candidate knows its full distribution (the model in process): the bound is tighter than trace vs trace
        ref = as_step(p, token, 5)
        full = bounded_step(0, 0, ref, dict(enumerate(q)), candidate_top=())
        assert bounds[1] - 1e-12 <= full.kld <= true + 1e-12


def test_a_changed_distribution_with_the_same_greedy_path_shows_in_the_bound_and_the_budget() -> None:
    """The negative control of the bound: one token's probability moved 0.2 while the top-1 stays."""
    ref = trace_builder.step([(5, math.log(0.7)), (6, math.log(0.2)), (7, math.log(0.05))])
    cand = trace_builder.step([(5, math.log(0.5)), (6, math.log(0.4)), (7, math.log(0.05))])
    same = trace_builder.trace([ref] * 12)
    moved = trace_builder.trace([cand] * 12)
    steps, skipped, _ = trace_fidelity(same, same)
    assert skipped == 0 and aggregate(steps)["kld_max"] == 0.0
    assert FidelityReport(tuple(steps), PRESETS["int8"]).holds
    steps, _, _ = trace_fidelity(same, moved)
    metrics = aggregate(steps)
    expected = 0.7 * math.log(0.7 / 0.5) + 0.2 * math.log(0.2 / 0.4)  # the rest buckets are equal: 0.05 each
    assert metrics["kld_mean"] == pytest.approx(expected, rel=1e-5)
    assert metrics["top1_agreement"] == 1.0 and metrics["flips"] == 0.0 and metrics["on_path_share"] == 1.0
    assert metrics["rms_delta_p"] == pytest.approx(0.2, rel=1e-5)
    assert metrics["covered_min"] == pytest.approx(0.95, rel=1e-5)
    report = FidelityReport(tuple(steps), PRESETS["int8"])
    assert not report.holds
    text = str(report)
    assert "OUTSIDE budget int8: kld_mean" in text and "LOWER BOUND" in text and "covered 95.00%" in text
    assert f"kld_mean = {expected:.4g} > limit {PRESETS['int8'].kld_mean:g}" in text
    assert "worst step: prompt 0 step 0" in text and "reference top-k: 5 -0.3567" in text


def test_traces_are_compared_until_the_candidate_leaves_the_path_and_flips_are_counted() -> None:
    a = trace_builder.step([(5, -0.1), (6, -3.0)])
    b = trace_builder.step([(6, -0.1), (5, -3.0)])
    reference = trace_builder.trace([a, a, a, a])
    candidate = trace_builder.trace([a, b, b, b])  # prefers 6 at step 1, then decodes on another context
    steps, skipped, _ = trace_fidelity(reference, candidate)
    assert [s.step for s in steps] == [0, 1] and skipped == 2
    metrics = aggregate(steps)
    assert metrics["flips"] == 1.0 and metrics["top1_agreement"] == 0.5 and metrics["on_path_steps"] == 1.0
    report = FidelityReport(tuple(steps), Budget(top1_agreement=0.9), skipped=skipped)
    assert not report.holds and "top1_agreement = 0.5 < limit 0.9" in str(report)
    assert "2 reference steps not compared" in str(report)


def test_budgets_from_presets_mappings_and_text_with_clear_errors() -> None:
    assert budget_of("int8") is PRESETS["int8"]
    assert budget_of({"kld_mean": 1e-3}) == Budget(kld_mean=1e-3)
    assert parse_budget("kld_mean=1e-3, flips=0") == Budget(kld_mean=1e-3, flips=0)
    with pytest.raises(ValueError, match="unknown fidelity budget 'int3'; the presets are 'bf16', 'fp16', 'int8'"):
        budget_of("int3")
    with pytest.raises(ValueError, match="unknown fidelity limit 'kld_avg'; accepted: kld_mean"):
        budget_of({"kld_avg": 1e-3})
    with pytest.raises(ValueError, match=r"top1_agreement=1\.5 is a share between 0 and 1"):
        budget_of({"top1_agreement": 1.5})
    with pytest.raises(ValueError, match="kld_max=-1 must be a finite number >= 0"):
        Budget(kld_max=-1)
    with pytest.raises(ValueError, match="--budget: kld_mean='x' is not a number"):
        parse_budget("kld_mean=x")
    with pytest.raises(TypeError, match="budget must be a preset name"):
        budget_of(3)  # type: ignore[arg-type]


def write(path: Path, trace: GenerationTrace) -> Path:
    path.write_text(trace.to_json(), encoding="utf-8")
    return path


def test_genguard_fidelity_exits_1_outside_4_unproven_and_2_on_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ref = trace_builder.step([(5, math.log(0.7)), (6, math.log(0.2)), (7, math.log(0.05))])
    cand = trace_builder.step([(5, math.log(0.5)), (6, math.log(0.4)), (7, math.log(0.05))])
    reference = write(tmp_path / "ref.json", trace_builder.trace([ref] * 12))
    candidate = write(tmp_path / "cand.json", trace_builder.trace([cand] * 12))
    # two traces hold top-k only: a KLD bound of 0 holds the budget but proves nothing (the rest of the vocabulary
    # may differ), so it is not a pass
    assert cli.main(["fidelity", str(reference), str(reference), "--budget", "int8"]) == 4
    out = capsys.readouterr().out
    assert "fidelity UNPROVEN for budget int8" in out
    assert "budget int8: unproven (exit 4); reference mass covered: 95.00% on average, 95.00% at the least" in out
    assert cli.main(["fidelity", str(reference), str(candidate), "--budget", "int8"]) == 1
    out = capsys.readouterr().out
    assert "OUTSIDE budget int8" in out and "budget int8: outside (exit 1)" in out
    assert cli.main(["fidelity", str(reference), str(candidate), "--budget", "kld_mean=1", "--json"]) == 4
    data = json.loads(capsys.readouterr().out)
    assert data["holds"] is True and data["exact"] is False and data["metrics"]["steps"] == 12.0
    assert data["status"] == "unproven"
    assert cli.main(["fidelity", str(reference), str(candidate)]) == 0  # no budget: a report, no gate
    assert cli.main(["fidelity", str(reference), str(tmp_path / "missing.json")]) == 2
    assert "missing.json: no such file" in capsys.readouterr().err
    assert cli.main(["fidelity", str(reference), str(candidate), "--budget", "int3"]) == 2
    assert "unknown fidelity budget 'int3'" in capsys.readouterr().err


def test_genguard_show_gives_each_steps_kld_bound_to_a_reference(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)  # the pipe's table width (160), as test_cli does
    a = trace_builder.step([(5, math.log(0.7)), (6, math.log(0.2)), (7, math.log(0.05))])
    b = trace_builder.step([(5, math.log(0.5)), (6, math.log(0.4)), (7, math.log(0.05))])
    c = trace_builder.step([(6, -0.1), (5, -3.0)])
    reference = write(tmp_path / "ref.json", trace_builder.trace([a, a, a, a]))
    candidate = write(tmp_path / "cand.json", trace_builder.trace([a, b, c, a]))  # moved at 1, left the path at 2
    assert cli.main(["show", str(candidate), "--reference", str(reference)]) == 0
    out = capsys.readouterr().out
    assert "KLD ≥" in out
    rows = [line.split("│") for line in out.splitlines() if line.startswith("│")]
    cells = [[c.strip() for c in row] for row in rows if row[1].strip().isdigit()]  # not a wrapped top-k line
    moved = 0.7 * math.log(0.7 / 0.5) + 0.2 * math.log(0.2 / 0.4)
    assert [row[7] for row in cells][1:] == [f"{moved:.3g}", "1.63", "–"]  # nothing compared after the path left
    assert float(cells[0][7]) < 1e-9
    assert cli.main(["show", str(candidate), "--reference", str(tmp_path / "nope.json")]) == 2
    assert "nope.json: no such file" in capsys.readouterr().err
