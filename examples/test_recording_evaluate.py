"""Recording a real fine-tune: what a Seq2SeqTrainer's evaluate() generated for its first eval examples, snapshotted.

The recorder reads the evaluated examples from the callback kwargs' `eval_dataloader` (the Trainer calls
`on_prediction_step` without the batch), records them at every evaluate(), raises a GenguardTrainingWarning when the
model loops (on_degenerate="warn"; "stop" would end the run), and logs genguard/* figures with the Trainer's logs.
"""

from __future__ import annotations

from transformers import DataCollatorForSeq2Seq, Seq2SeqTrainer, Seq2SeqTrainingArguments

from pytest_genguard import (
    GenerationRecorder,
    GenguardTrainingWarning,
    assert_no_repetition,
    tiny_model,
    tiny_tokenizer,
)

PAIRS = [  # (encoder input, target): the tiny tokenizer's own sentences
    ("the quick", " brown fox jumps over the lazy dog."),
    ("once upon a", " time there was a little cat."),
    ("the rain", " falls on the green hills."),
    ("my favourite", " colour is blue."),
    ("we cook", " soup in the big pot."),
    ("the train", " leaves the station at nine."),
    ("she reads", " a book under the old tree."),
    ("one two", " three four five six seven."),
]


def test_evaluate_recordings_of_a_seq2seq_fine_tune(tmp_path, genguard_snapshot, recwarn):
    tokenizer = tiny_tokenizer()
    model = tiny_model("t5")
    data = [
        {"input_ids": tokenizer(source)["input_ids"], "labels": tokenizer(target + tokenizer.eos_token)["input_ids"]}
        for source, target in PAIRS
    ]
    args = Seq2SeqTrainingArguments(
        output_dir=str(tmp_path),
        max_steps=40,
        per_device_train_batch_size=8,
        per_device_eval_batch_size=4,
        learning_rate=1e-2,
        eval_strategy="steps",
        eval_steps=20,
        logging_steps=20,
        predict_with_generate=True,
        seed=0,
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
    )
    recorder = GenerationRecorder(eval_examples=3, max_new_tokens=12, on_degenerate="warn")
    trainer = Seq2SeqTrainer(
        model=model,
        args=args,
        train_dataset=data,
        eval_dataset=data,
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model),
        processing_class=tokenizer,
    )
    recorder.attach(trainer)  # figures through trainer.log(): trainer_state.json and every report_to integration
    trainer.train()

    history = recorder.history
    assert [(c.step, c.event) for c in history] == [(20, "evaluate"), (40, "evaluate")]
    assert [p.prompt_ids for p in history[-1].trace] == [tuple(d["input_ids"]) for d in data[:3]]
    final = history[-1].trace
    assert all(p.finish_reason == "eos" for p in final), "40 steps teach the tiny t5 to stop"
    assert_no_repetition(final)
    assert not any(issubclass(w.category, GenguardTrainingWarning) and "step 40" in str(w.message) for w in recwarn)
    logged = [e for e in trainer.state.log_history if "eval_genguard/eos_rate" in e]
    assert [e["eval_genguard/eos_rate"] for e in logged][-1] == 1.0
    assert history == genguard_snapshot
