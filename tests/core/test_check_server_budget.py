"""`genguard check-server --budget`: the server judged by a fidelity budget instead of the float rule, on recorded
responses of the real float32 and bfloat16 vLLM servers (replayed over loopback): the tri-state and its exit codes,
the logprobs asked of the server (its cap), the mass covered, staleness, and a dtype switch without a budget."""

from __future__ import annotations

from pathlib import Path

import pytest
from replay_server import Reply, recorded, serving
from served_replay import BF16, F32, SERVED_BF16, served, snapshot_file, swapped, widened

from pytest_genguard import cli
from pytest_genguard.serving.check import UNCAPPED_LOGPROBS, LogprobCap


def test_a_bfloat16_server_fails_the_float_rule_and_the_message_names_budget(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = snapshot_file(tmp_path)
    with serving(served(BF16)) as r:
        assert cli.main(["check-server", r.url, str(path)]) == 1
    out = capsys.readouterr().out
    assert "dtype bfloat16 (inferred" in out
    assert f"judge it by a fidelity budget instead: genguard check-server {r.url} {path} --budget bf16" in out


def test_the_float32_server_holds_the_bf16_budget_on_lower_bounds_only_exit_4(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = snapshot_file(tmp_path)
    with serving(served(F32, cap=5)) as r:
        assert cli.main(["check-server", r.url, str(path), "--budget", "bf16"]) == 4
    out = capsys.readouterr().out
    assert f"UNPROVEN {path}: budget bf16" in out and "(lower bounds); dtype float32" in out
    assert "unproven (exit 4); reference mass covered: 89.01% on average, 73.58% at the least" in out


def test_the_bfloat16_server_asked_at_the_servers_cap_holds_its_budget_unproven(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = snapshot_file(tmp_path)
    with serving(served(widened(BF16, 20), cap=20)) as r:
        argv = ["check-server", r.url, str(path), "--budget", SERVED_BF16, "--dtype", "bfloat16"]
        assert cli.main(argv) == 4
    out = capsys.readouterr().out
    assert "logprobs per step: 20 (the server's cap; the snapshots recorded a top-5)" in out
    assert f"UNPROVEN {path}: budget custom" in out and "(lower bounds); dtype bfloat16 (declared)" in out
    asked = [body["prompt_logprobs"] for _, route, body in r.requests if route == "/v1/completions"]
    assert asked[0] > 20 and set(asked[1:]) == {20}  # the cap probe, then the snapshot asked at the cap


def test_the_bfloat16_servers_lower_bound_breaks_a_tighter_budget_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the negative control of the budget above: the same server, a mean limit below its measured lower bound
    path = snapshot_file(tmp_path)
    with serving(served(BF16, cap=5)) as r:
        assert cli.main(["check-server", r.url, str(path), "--budget", "kld_mean=2e-4"]) == 1
    assert "kld_mean = 0.0002588 > limit 0.0002" in capsys.readouterr().out


def test_a_server_that_changed_its_answer_is_outside_the_budget_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the negative control of the exit above: the same bf16 responses with the top two swapped at every step
    path = snapshot_file(tmp_path)
    with serving(served(swapped(BF16), cap=5)) as r:
        assert cli.main(["check-server", r.url, str(path), "--budget", "bf16"]) == 1
    out = capsys.readouterr().out
    assert f"OUTSIDE {path}: budget bf16" in out and "outside (exit 1)" in out
    assert "kld_mean = " in out and "worst step: prompt 0" in out


def test_max_logprobs_is_asked_as_given_and_below_the_snapshots_top_k_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = snapshot_file(tmp_path)
    with serving(served(widened(BF16, 8), cap=20)) as r:
        assert cli.main(["check-server", r.url, str(path), "--budget", SERVED_BF16, "--max-logprobs", "8"]) == 4
        assert "logprobs per step: 8 (--max-logprobs)" in capsys.readouterr().out
        assert {b["prompt_logprobs"] for _, route, b in r.requests if route == "/v1/completions"} == {8}
        assert cli.main(["check-server", r.url, str(path), "--budget", "bf16", "--max-logprobs", "3"]) == 2
        assert "--max-logprobs 3: below the snapshots' top-5; ask for at least 5" in capsys.readouterr().err
        # more than the server allows: its refusal names the flag to raise
        assert cli.main(["check-server", r.url, str(path), "--budget", "bf16", "--max-logprobs", "30"]) == 2
        assert "restart the server with --max-logprobs 30" in capsys.readouterr().err
    assert cli.main(["check-server", "http://127.0.0.1:9", str(path), "--max-logprobs", "0"]) == 2
    assert "argument --max-logprobs: '0' must be at least 1" in capsys.readouterr().err


def test_a_bad_budget_is_bad_input_naming_the_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = snapshot_file(tmp_path)
    assert cli.main(["check-server", "http://127.0.0.1:9", str(path), "--budget", "bf17"]) == 2
    assert "--budget: unknown fidelity budget 'bf17'" in capsys.readouterr().err


def test_another_tokenizer_is_stale_under_a_budget_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = snapshot_file(tmp_path)
    r = served(BF16, cap=5)
    tokens = [*recorded("tokenize")["body"]["tokens"]]
    tokens[0] += 1
    r.routes[("POST", "/tokenize")] = Reply(200, {**recorded("tokenize")["body"], "tokens": tokens})
    with serving(r):
        assert cli.main(["check-server", r.url, str(path), "--budget", "bf16"]) == 3
    assert f"STALE {path}" in capsys.readouterr().out


# What the served model's own bf16 cast costs along its snapshot's paths (hf.fidelity.calibrate on the 4 prompts of
# tests/serving's served_trace, exact, rounded): a snapshot that stores it has the bf16 preset at its scale.
CALIBRATION = {
    "bf16.kld_max": 0.0037,
    "bf16.kld_mean": 0.00051,
    "bf16.kld_p90": 0.00092,
    "bf16.kld_p99": 0.0027,
    "bf16.top1_agreement": 0.96,
}


def test_a_calibrated_snapshot_puts_the_bf16_preset_at_its_models_scale(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    calibrated = snapshot_file(tmp_path, "calibrated.genguard", calibration=CALIBRATION)
    with serving(served(BF16, cap=5)) as r:
        assert cli.main(["check-server", r.url, str(calibrated), "--budget", "bf16"]) == 4
        out = capsys.readouterr().out
        assert "relative to the reference model's own bf16 conversion" in out and "unproven (exit 4)" in out
        # the negative control: the same server, the snapshot without its calibration (the fixed limits)
        plain = snapshot_file(tmp_path, "plain.genguard")
        assert cli.main(["check-server", r.url, str(plain), "--budget", "bf16"]) == 1
        assert "fixed limits: the reference has no calibration figures for bf16" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("cap", "k", "asked"),
    [
        (LogprobCap(True, 20), 5, (20, "the server's cap; the snapshots recorded a top-5")),
        (LogprobCap(True, 20), 30, (30, "the server's cap; the snapshots recorded a top-30")),  # never below top-k
        (LogprobCap(True, None), 5, (UNCAPPED_LOGPROBS, "the server sets no cap; the snapshots recorded a top-5")),
        (LogprobCap(False, None), 5, (None, "")),  # a mapping that cannot ask: each snapshot's own top-k
    ],
)
def test_one_probed_cap_answers_every_top_k(cap: LogprobCap, k: int, asked: tuple[int | None, str]) -> None:
    # --genguard-server probes the cap once per run and asks it per snapshot (it probed once per distinct top-k)
    assert cap.asked(k) == asked
