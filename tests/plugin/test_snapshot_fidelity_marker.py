"""``@pytest.mark.genguard(fidelity=...)``: a snapshot recorded before a precision switch judges the new run by a
fidelity budget: a copy within it passes (a changed weights fingerprint and dtype are the point, not stale), a copy
outside it fails naming the metric, its value and limit and the worst step; changed settings are still stale."""

from __future__ import annotations

import pytest
import torch
from cross_kernel import PINS, PROMPTS
from snapshot_support import run, set_variants, setup

import pytest_genguard as gg

MARKED = """
import pytest
from conftest import make_trace


@pytest.mark.genguard(fidelity={budget})
def test_path(genguard_snapshot):
    assert make_trace("test_path") == genguard_snapshot
"""

PLAIN = MARKED.replace("@pytest.mark.genguard(fidelity={budget})\n", "")


@pytest.fixture
def recorded(pytester: pytest.Pytester) -> pytest.Pytester:
    setup(pytester, PLAIN)
    run(pytester, "--snapshot-update").assert_outcomes(passed=1)
    return pytester


def mark(pytester: pytest.Pytester, budget: str) -> None:
    (pytester.path / "test_gen.py").write_text(MARKED.format(budget=budget))


QUANTIZED = {"dtype": "bfloat16", "weights": "b"}  # another dtype, other weights: the copy the budget is about


def test_a_copy_within_the_budget_passes_where_the_plain_snapshot_fails(recorded: pytest.Pytester) -> None:
    set_variants(recorded, test_path={**QUANTIZED, "drift": -1e-4})
    run(recorded).assert_outcomes(failed=1)  # the control: without the marker, the switch fails
    mark(recorded, '"int8"')
    run(recorded).assert_outcomes(passed=1)


def test_a_copy_outside_the_budget_fails_naming_metric_value_limit_and_worst_step(recorded: pytest.Pytester) -> None:
    mark(recorded, '"int8"')
    set_variants(recorded, test_path={**QUANTIZED, "drift": -0.05})  # step 0's top-1 loses 3% of its mass
    result = run(recorded, "-vv")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*fidelity OUTSIDE budget int8: kld_mean; 3 steps, KLD is a LOWER BOUND*",
            "*kld_mean = 0.0008* > limit 0.0002",
            "*worst step: prompt 0 'hello' step 0 (reference token 10 ' the'): KLD 0.002* (lower bound)*",
            "*reference top-k: 10 ' the' -0.5, 11 -2, 12 -3",
            "*candidate top-k: 10 ' the' -0.55, 11 -2, 12 -3",
            "*the dtype switch judged by this budget: recorded float32, now bfloat16",
        ]
    )
    mark(recorded, '{"kld_max": 1e-2}')  # a mapping of limits: this copy is within it
    run(recorded).assert_outcomes(passed=1)


def test_the_html_report_draws_each_steps_kld_of_a_failed_budget(recorded: pytest.Pytester) -> None:
    mark(recorded, '"int8"')
    set_variants(recorded, test_path={**QUANTIZED, "drift": -0.05})
    run(recorded, "--genguard-report", "report.html").assert_outcomes(failed=1)
    page = (recorded.path / "report.html").read_text(encoding="utf-8")
    assert "<th>KLD ≥</th><th>Δp</th><th>same top-1</th>" in page
    assert "<td class=n>0.00267</td><td class=n>-0.0296</td><td>yes</td>" in page  # step 0, the one that moved
    assert "expected top-k" not in page  # judged by the budget, not drawn as a float-rule comparison


def test_changed_settings_are_still_stale_under_a_budget(recorded: pytest.Pytester) -> None:
    mark(recorded, '"int8"')
    set_variants(recorded, test_path={**QUANTIZED, "max_new_tokens": 4})
    result = run(recorded)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*stale*max_new_tokens*"])
    set_variants(recorded, test_path={**QUANTIZED, "tokenizer": "u"})
    result = run(recorded)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*stale*tokenizer changed: tiny tttttttttttt -> tiny uuuuuuuuuuuu*"])


PARTS = {"vocab": 768, "vocab_hash": "1a2b3c", "added_tokens": 4, "added_tokens_hash": "4d5e6f"}
TEMPLATE = "{% for m in messages %}\n{{ m.content }}\n{% endfor %}"
TOKENIZER = {"parts": PARTS, "chat_template": TEMPLATE}


def test_a_changed_tokenizer_or_chat_template_is_stale_under_a_budget_named_part_by_part(
    pytester: pytest.Pytester,
) -> None:
    """The marker holds the copy to the recorded tokenizer through compare() (`Fingerprints.TOKENIZER`), so the
    reason is compare's: what changed, not two hashes."""
    setup(pytester, PLAIN, test_path=TOKENIZER)
    run(pytester, "--snapshot-update").assert_outcomes(passed=1)
    mark(pytester, '"int8"')
    set_variants(pytester, test_path={**TOKENIZER, **QUANTIZED})  # other weights, same tokens: judged, not stale
    run(pytester).assert_outcomes(passed=1)
    grown = {"tokenizer": "u", "vocab_size": 770, "parts": {**PARTS, "added_tokens": 6, "added_tokens_hash": "7a8b"}}
    set_variants(pytester, test_path={**TOKENIZER, **QUANTIZED, **grown})  # the values are within the budget
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*stale*tokenizer changed: vocabulary size 768 -> 770, added tokens 4 -> 6*"])
    edited = TEMPLATE.replace("content", "text")
    set_variants(pytester, test_path={**TOKENIZER, **QUANTIZED, "chat_template": edited})
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*stale*chat template changed: line 2 *m.text*"])


@pytest.mark.parametrize(
    ("budget", "message"),
    [
        ('"int3"', "*unknown fidelity budget 'int3'; the presets are 'bf16', 'fp16', 'int8', 'int4'*"),
        ('{"kld_avg": 1e-3}', "*unknown fidelity limit 'kld_avg'; accepted: kld_mean*"),
        ("3", "*fidelity=...) on test_gen.py::test_path: 3 is not a preset name*"),
    ],
)
def test_a_bad_budget_fails_the_test_naming_it(recorded: pytest.Pytester, budget: str, message: str) -> None:
    mark(recorded, budget)
    result = run(recorded)
    result.assert_outcomes(errors=1)  # at the fixture's setup, as every bad genguard marker
    result.stdout.fnmatch_lines([message])


VERIFIED = """
from pathlib import Path

import pytest
import torch

import pytest_genguard

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def model():
    \"\"\"The pinned fine-tuned tiny gpt2, as the file "kind" says: fp32, a bf16 cast, or a bf16 cast whose first
    layer norm weight is 5% off (a broken conversion).\"\"\"
    model = pytest_genguard.finetune("gpt2", seed=0, pin_dir=PINS, pin="use").model
    kind = (HERE / "kind").read_text()
    if kind != "fp32":
        model = model.to(torch.bfloat16)
    if kind == "broken":
        with torch.no_grad():
            model.transformer.h[0].ln_2.weight.mul_(1.05)
    return model


@pytest.mark.genguard(fidelity="bf16")
def test_verified(genguard_snapshot, model):
    genguard_snapshot.verify(model, pytest_genguard.tiny_tokenizer(), PROMPTS, max_new_tokens=16)
"""


@pytest.fixture(scope="module")
def warm_imports() -> None:
    """Everything the inner run of the verify() test touches, loaded before its pytester fixture: pytester's
    in-process runs drop the modules they imported, and torch cannot load its extensions twice in one process (as
    test_snapshot_verify.py does)."""
    model = gg.finetune("gpt2", seed=0, pin_dir=PINS, pin="use").model
    trace = gg.record(model, gg.tiny_tokenizer(), PROMPTS[:1], max_new_tokens=2)
    assert gg.verify(model, gg.tiny_tokenizer(), trace)
    assert gg.fidelity(model.to(torch.bfloat16), gg.tiny_tokenizer(), trace, budget="bf16")


def test_verify_teacher_forces_the_copy_along_the_stored_paths_and_judges_it(
    warm_imports: None, pytester: pytest.Pytester
) -> None:
    pytester.makepyfile(test_gen=f"PINS = {str(PINS)!r}\nPROMPTS = {PROMPTS!r}\n" + VERIFIED)
    kind = pytester.path / "kind"
    kind.write_text("fp32")
    run(pytester, "--snapshot-update").assert_outcomes(passed=1)
    kind.write_text("bf16")
    run(pytester).assert_outcomes(passed=1)
    kind.write_text("broken")
    result = run(pytester, "-vv")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*fidelity OUTSIDE budget bf16: *", "*> limit *", "*worst step: prompt *"])
