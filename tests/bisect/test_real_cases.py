"""`genguard bisect` on real decoding changes between transformers releases, end to end: the committed snapshot was
recorded on the last good release (tests/bisect_cases), the command installs the releases between it and the bad one
with uv, replays the test in each and must name the first bad release, in under 3 minutes (the issue's bar; 30-50 s
here). Run by .ci/run (GENGUARD_BISECT_E2E=1)."""

import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_SECONDS = 180
pytestmark = pytest.mark.bisect_e2e


def genguard_bisect(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest_genguard.cli", "bisect", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    seconds = time.monotonic() - start
    sys.stdout.write(done.stdout + done.stderr + f"\n({seconds:.0f} s)\n")
    return done, seconds


def test_bisect_names_5_23_0_for_the_repetition_penalty_on_left_padding():
    # Recorded on 5.21.1 (the snapshot's environment is the default good release); 5.23.0 stopped penalising padding.
    done, seconds = genguard_bisect(
        "tests/bisect_cases/case_repetition_penalty.py::test_repetition_penalty_ignores_left_padding", "--bad", "5.23.0"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "first release with another verdict: 5.23.0 (last with the good verdict: 5.22.2)" in done.stdout
    assert "good       transformers 5.22.2: passed (identical)" in done.stdout
    assert (
        "first bad  transformers 5.23.0: regression: prompt 0 'the quick brown fox' diverges at step 4" in done.stdout
    )
    assert "recorded on transformers 5.21.1, now transformers 5.23.0" in done.stdout
    assert seconds < MAX_SECONDS


def test_bisect_names_5_19_0_for_the_length_penalty_that_turned_a_masked_eos_into_nan():
    # Recorded on 5.17.0, where EOS scored NaN and greedy decoding stopped early; 5.19.0 keeps a masked EOS masked
    # (ExponentialDecayLengthPenalty: penalty.masked_fill(~isfinite(eos score), 0)).
    done, seconds = genguard_bisect(
        "tests/bisect_cases/case_length_penalty_nan.py::test_exponential_decay_length_penalty_while_eos_is_masked",
        "--bad",
        "5.19.0",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "first release with another verdict: 5.19.0 (last with the good verdict: 5.18.0)" in done.stdout
    assert "good       transformers 5.18.0: passed" in done.stdout
    assert (
        "first bad  transformers 5.19.0: regression: prompt 0 'the quick brown fox' diverges at step 3" in done.stdout
    )
    assert "recorded on transformers 5.17.0, now transformers 5.19.0" in done.stdout
    assert seconds < MAX_SECONDS
