"""`GenerationRecorder(eval_examples=N)` overhead: a `Trainer` run that evaluates every 50 steps, with the recorder
recording the first examples of every evaluate() vs the same run without it.

The run: tiny GPT-2, the shipped sentences (each ending in EOS) as training and evaluation data, 200 steps, batch 8,
lr 1e-2, evaluation every 50 steps (4 evaluations of the 8 sentences); the recorder records the first 8 examples of
each evaluation (their first 8 tokens, 24 new tokens, top-5) and checks them for loops (`on_degenerate="warn"`).
Built from public transformers API. Fresh model per run; runs alternate. As in `recorder_overhead.py`, the headline
times the recorder's hooks inside each run (training time with them over training time less them), because whole-run
noise is as large as the overhead; the alternating whole-run ratio and the evaluation loop's own time are given beside.
"""

from __future__ import annotations

import tempfile
import time
import warnings

from benchmarks.harness import Result, Spread, ms
from benchmarks.recorder_overhead import Clock, Run, alternate_runs

STEPS = 200
EVAL_EVERY = 50
EXAMPLES = 8
HOOKS = ("on_train_begin", "on_step_end", "on_log", "on_evaluate", "on_predict", "on_train_end")


def _train(with_recorder: bool, steps: int) -> Run:
    """One run, with or without the recorder; `in_evaluate` is the seconds inside the Trainer's `evaluate()` (the
    recording included, as it runs in on_evaluate)."""
    from transformers import DataCollatorForLanguageModeling, Trainer, TrainingArguments
    from transformers.trainer_callback import PrinterCallback

    from pytest_genguard.hf.recorder import GenerationRecorder
    from pytest_genguard.hf.tiny import finetune_texts, tiny_model, tiny_tokenizer

    tokenizer = tiny_tokenizer()
    model = tiny_model("gpt2")
    eos = int(tokenizer.eos_token_id)
    data = [{"input_ids": [*tokenizer(t)["input_ids"], eos]} for t in finetune_texts()]
    every = max(1, steps // (STEPS // EVAL_EVERY))
    recorder = GenerationRecorder(eval_examples=EXAMPLES, on_degenerate="warn")
    in_hooks = Clock()
    in_hooks.wrap(recorder, HOOKS)
    with tempfile.TemporaryDirectory(prefix="genguard-bench-") as out:
        args = TrainingArguments(
            output_dir=out,
            max_steps=steps,
            per_device_train_batch_size=8,
            per_device_eval_batch_size=8,
            learning_rate=1e-2,
            lr_scheduler_type="linear",
            seed=0,
            data_seed=0,
            logging_steps=every,
            eval_strategy="steps",
            eval_steps=every,
            save_strategy="no",
            report_to="none",
            disable_tqdm=True,
            use_cpu=True,
        )
        trainer = Trainer(
            model=model,
            args=args,
            train_dataset=data,
            eval_dataset=data,
            data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False),
            processing_class=tokenizer,
            callbacks=[recorder] if with_recorder else [],
        )
        trainer.remove_callback(PrinterCallback)
        in_evaluate = Clock()
        in_evaluate.wrap(trainer, ("evaluate",))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an untrained model loops at the first evaluations: that is the alarm
            start = time.perf_counter()
            trainer.train()
            seconds = time.perf_counter() - start
    return Run(seconds, model, len(recorder.history), in_hooks.seconds, in_evaluate.seconds)


def run(smoke: bool) -> list[Result]:
    steps = 4 if smoke else STEPS
    runs = alternate_runs(_train, steps, pairs=1 if smoke else 4)
    paired, share, hooks, checkpoints, identical = (
        runs.paired,
        runs.share,
        runs.in_hooks,
        runs.checkpoints,
        runs.identical,
    )
    per_checkpoint = hooks.median / checkpoints if checkpoints else float("nan")
    eval_plain = Spread(tuple(r.in_evaluate for r in runs.plain))
    evaluate_recorded = tuple(r.in_evaluate for r in runs.recorded)
    per_evaluation = eval_plain.median / checkpoints if checkpoints else float("nan")
    notes = [
        f"{ms(hooks.median)} inside the recorder's hooks per training run ({checkpoints} evaluate() recordings of "
        f"{EXAMPLES} examples, ≈ {ms(per_checkpoint)} each; {steps} steps): the headline is training time with the "
        "recorder over training time less that",
        f"one evaluate() of the {EXAMPLES} examples takes ≈ {ms(per_evaluation)} without the recorder: recording "
        f"generates {EXAMPLES}×24 tokens where the evaluation loop runs one forward pass",
        f"alternating whole runs: {paired.b.median:.2f} s without vs {paired.a.median:.2f} s with the recorder, "
        f"ratio {paired.ratios.median:.3f}×",
        f"weights after training bitwise identical with and without the recorder: {identical}",
    ]
    details = [
        f"- with recorder, seconds min/median/max: {paired.a.text('{:.3f}')}; of that inside its hooks: "
        f"{hooks.text('{:.3f}')}",
        f"- without, seconds min/median/max: {paired.b.text('{:.3f}')}",
        f"- inside evaluate() per run, without / with the recorder (median): {eval_plain.median:.3f} s / "
        f"{Spread(evaluate_recorded).median:.3f} s",
        f"- per-pair ratio of whole runs min/median/max: {paired.ratios.text('{:.3f}', '×')}",
        "- the overhead scales with the number of evaluations and `eval_examples`, not with the training steps",
    ]
    return [
        Result(
            key="recorder_eval",
            figure=f"GenerationRecorder training overhead, eval recording ({EXAMPLES} examples per evaluate())",
            target="report",
            spread=share,
            unit="×",
            headline=f"{share.median:.3f}× (+{(share.median - 1) * 100:.1f}%)",
            met=None,
            notes=notes,
            details=details,
        )
    ]
