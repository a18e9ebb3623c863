"""`GenerationRecorder` training overhead: a HF `Trainer` run with the recorder vs the same run without it.

The run is the one `genguard_finetune("gpt2")` does by default: tiny GPT-2, the shipped fine-tuning sentences, 200
steps, batch 8, lr 1e-2, with the recorder at its default probe settings (the four shipped probe prompts, 24 new
tokens, top-5) recording every 50 steps as `finetune()` does. Built here from public transformers API (not from
finetune.py's internals) so the figure measures the callback alone. Fresh model per run; runs alternate. Whole-run
times vary by about as much as the overhead, so the headline times the recorder's hooks inside each run (with / with
less hooks) and the alternating whole-run ratio is given beside it.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchmarks.harness import Paired, Result, Spread, ms

STEPS = 200
EVERY = 50


class _Collator:
    """Pad to the longest row; padding is masked out of the labels."""

    def __init__(self, pad_id: int) -> None:
        self.pad_id = pad_id

    def __call__(self, rows: list[dict[str, list[int]]]) -> dict[str, Any]:
        import torch

        width = max(len(r["input_ids"]) for r in rows)
        ids = torch.full((len(rows), width), self.pad_id)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, : len(r["input_ids"])] = torch.tensor(r["input_ids"])
            mask[i, : len(r["input_ids"])] = 1
        labels = ids.masked_fill(mask == 0, -100)
        return {"input_ids": ids, "attention_mask": mask, "labels": labels}


class Clock:
    """Seconds spent inside wrapped callables, added up."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def wrap(self, owner: Any, names: tuple[str, ...]) -> None:
        for name in names:
            method = getattr(owner, name)

            def timed(*args: Any, _method: Any = method, **kwargs: Any) -> Any:
                start = time.perf_counter()
                try:
                    return _method(*args, **kwargs)
                finally:
                    self.seconds += time.perf_counter() - start

            setattr(owner, name, timed)  # the Trainer looks hooks up on the instance: getattr(callback, event)


@dataclass(frozen=True)
class Run:
    """One training run: `trainer.train()` seconds, the trained model, the recorder's checkpoints, the seconds inside
    its hooks and (where measured) inside the Trainer's `evaluate()`."""

    seconds: float
    model: Any
    checkpoints: int
    in_hooks: float
    in_evaluate: float = 0.0


@dataclass(frozen=True)
class Alternated:
    """Runs with and without the recorder, alternating which goes first, after a warm-up run."""

    recorded: tuple[Run, ...]
    plain: tuple[Run, ...]
    identical: bool
    """Whether the weights after training were bitwise the same with and without the recorder, in every pair."""

    @property
    def paired(self) -> Paired:
        return Paired(Spread(tuple(r.seconds for r in self.recorded)), Spread(tuple(r.seconds for r in self.plain)))

    @property
    def share(self) -> Spread:
        """Training time with the recorder over training time less its hooks, per recorded run (the headline)."""
        return Spread(tuple(r.seconds / (r.seconds - r.in_hooks) for r in self.recorded))

    @property
    def in_hooks(self) -> Spread:
        return Spread(tuple(r.in_hooks for r in self.recorded))

    @property
    def checkpoints(self) -> int:
        return max(r.checkpoints for r in self.recorded)


def alternate_runs(train: Callable[[bool, int], Run], steps: int, pairs: int) -> Alternated:
    """`pairs` pairs of `train(with_recorder, steps)`, the order alternating, after an untimed warm-up (first-call
    costs, imports and kernels, belong to neither side); each pair's weights are compared bitwise."""
    import torch

    train(False, 2)
    recorded: list[Run] = []
    plain: list[Run] = []
    identical = True
    for i in range(pairs):
        order = (False, True) if i % 2 == 0 else (True, False)
        runs = {with_recorder: train(with_recorder, steps) for with_recorder in order}
        recorded.append(runs[True])
        plain.append(runs[False])
        a, b = runs[True].model.state_dict(), runs[False].model.state_dict()
        identical = identical and all(torch.equal(a[k], b[k]) for k in a)
    return Alternated(tuple(recorded), tuple(plain), identical)


def _train(with_recorder: bool, steps: int) -> Run:
    """One run of the default fine-tune, with or without the recorder (its hooks clocked)."""
    from transformers import Trainer, TrainingArguments
    from transformers.trainer_callback import PrinterCallback

    from pytest_genguard.hf.recorder import GenerationRecorder
    from pytest_genguard.hf.tiny import finetune_texts, probe_prompts, tiny_model, tiny_tokenizer

    tokenizer = tiny_tokenizer()
    model = tiny_model("gpt2")
    eos = int(tokenizer.eos_token_id)
    data = [{"input_ids": [*tokenizer(t)["input_ids"], eos]} for t in finetune_texts()]
    every = max(1, steps // (STEPS // EVERY))
    recorder = GenerationRecorder(probe_prompts(), every_n_steps=every)
    clock = Clock()
    clock.wrap(recorder, ("on_train_begin", "on_step_end", "on_log", "on_evaluate", "on_train_end"))
    with tempfile.TemporaryDirectory(prefix="genguard-bench-") as out:
        args = TrainingArguments(
            output_dir=out,
            max_steps=steps,
            per_device_train_batch_size=8,
            learning_rate=1e-2,
            lr_scheduler_type="linear",
            seed=0,
            data_seed=0,
            logging_steps=every,
            save_strategy="no",
            report_to="none",
            disable_tqdm=True,
            use_cpu=True,
        )
        trainer = Trainer(
            model=model,
            args=args,
            train_dataset=data,
            data_collator=_Collator(int(tokenizer.pad_token_id)),
            processing_class=tokenizer,
            callbacks=[recorder] if with_recorder else [],
        )
        trainer.remove_callback(PrinterCallback)
        start = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - start
    return Run(seconds, model, len(recorder.history), clock.seconds)


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
    ratios = paired.ratios
    per_checkpoint = hooks.median / checkpoints if checkpoints else float("nan")
    notes = [
        f"{ms(hooks.median)} inside the recorder's hooks per training run ({checkpoints} checkpoints, "
        f"≈ {ms(per_checkpoint)} each; {steps} steps): the headline is training time with the recorder over training "
        f"time less that",
        f"alternating whole runs: {paired.b.median:.2f} s without vs {paired.a.median:.2f} s with the recorder, "
        f"ratio {ratios.median:.3f}× (run-to-run noise of the Trainer is of the same size as the overhead)",
        f"weights after training bitwise identical with and without the recorder: {identical}",
    ]
    details = [
        f"- with recorder, seconds min/median/max: {paired.a.text('{:.3f}')}; of that inside its hooks: "
        f"{hooks.text('{:.3f}')}",
        f"- without, seconds min/median/max: {paired.b.text('{:.3f}')}",
        f"- per-pair ratio of whole runs min/median/max: {ratios.text('{:.3f}', '×')}",
        "- a checkpoint is one `record()` of the probe batch (see the record() figure for its cost); the overhead "
        "scales with the number of checkpoints, not with the training steps",
    ]
    return [
        Result(
            key="recorder",
            figure="GenerationRecorder training overhead (default probes)",
            target="report",
            spread=share,
            unit="×",
            headline=f"{share.median:.3f}× (+{(share.median - 1) * 100:.1f}%)",
            met=None,
            notes=notes,
            details=details,
        )
    ]
