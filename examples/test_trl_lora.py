"""A chat model fine-tuned with TRL's SFTTrainer and a LoRA adapter, the GenerationRecorder attached.

The tiny Llama learns to answer four conversations (a chat template written for the tiny tokenizer: no hub). The
recorder's history is snapshotted like any trace (compared under the training tolerance: this example trains on every
machine it runs on, as test_training.py does, so there are no pinned weights to use). The adapter's decoding is then
checked against the base model's: the same conversations, recorded with the adapter and inside
``disable_adapter()``, are two subjects (the comparison says which adapter), and the adapter disabled decodes as the
base model did before training (within tolerance: the adapter layers route the base computation another way).
"""

from __future__ import annotations

import copy

import pytest
import transformers

from pytest_genguard import assert_no_repetition, compare, record, tiny_tokenizer
from pytest_genguard.core.verdict import Verdict

trl = pytest.importorskip("trl", reason="the TRL example needs trl and peft: pip install -e '.[adapters]'")
peft = pytest.importorskip("peft", reason="the TRL example needs trl and peft: pip install -e '.[adapters]'")

TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}{{ eos_token }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
CHATS = [  # (user, assistant): the tiny tokenizer's own sentences
    ("the quick", "brown fox jumps over the lazy dog."),
    ("once upon a", "time there was a little cat."),
    ("the rain", "falls on the green hills."),
    ("we cook", "soup in the big pot."),
]


def _conversation(user: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": user}]


def test_sft_with_a_lora_adapter_and_the_recorder(tmp_path, genguard_finetune, genguard_snapshot):
    from datasets import Dataset

    from pytest_genguard import GenerationRecorder

    tokenizer = tiny_tokenizer()
    tokenizer.chat_template = TEMPLATE
    # The base: the examples' pinned fine-tuned GPT-2 (it knows the sentences; an untrained tiny model's near-uniform
    # logits give a LoRA adapter nothing to steer). A copy: get_peft_model() adds the adapter layers in place.
    model = copy.deepcopy(genguard_finetune("gpt2").model)
    probes = [_conversation(user) for user, _ in CHATS[:2]]
    before = record(model, tokenizer, probes, max_new_tokens=12)

    data = Dataset.from_list(
        [{"messages": [*_conversation(user), {"role": "assistant", "content": answer}]} for user, answer in CHATS * 4]
    )
    args = trl.SFTConfig(
        output_dir=str(tmp_path),
        max_steps=90,
        per_device_train_batch_size=8,
        learning_rate=1e-2,
        logging_steps=10,
        seed=0,
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        max_length=64,
        dataloader_num_workers=0,
    )
    lora = peft.LoraConfig(
        r=8, lora_alpha=16, target_modules=["c_attn", "c_fc", "c_proj"], fan_in_fan_out=True, lora_dropout=0.0
    )
    # Seeded before the trainer: given a peft_config, TRL 0.24 (the adapters extra's floor) makes the adapter, randomly
    # initialized, before the Trainer seeds, from torch's generator as the process found it (seeded at random on every
    # start): the training, and which prompts it teaches to stop, differed run to run there. TRL 1.16 seeds first.
    transformers.set_seed(args.seed)
    trainer = trl.SFTTrainer(model=model, args=args, train_dataset=data, processing_class=tokenizer, peft_config=lora)
    # The probes as the chat template renders them (the tiny tokenizer adds no BOS of its own: one BOS).
    rendered = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in probes]
    recorder = GenerationRecorder(rendered, every_n_steps=45, max_new_tokens=12).attach(trainer)
    trainer.train()

    history = recorder.history
    assert [(c.step, c.event) for c in history] == [(45, "step"), (90, "step")]  # train_end at step 90: the same
    final = history[-1].trace
    assert final.model is not None and final.model.adapters is not None
    assert final.model.adapters["active"] == "default" and final.model.adapters["default.r"] == 8
    assert_no_repetition(final)

    tuned = trainer.model
    adapted = record(tuned, tokenizer, probes, max_new_tokens=12)
    assert adapted[0].messages == tuple(probes[0])
    assert [p.finish_reason for p in adapted] == ["eos", "eos"], "90 steps teach the adapter to answer and stop"
    assert_no_repetition(adapted)
    with tuned.disable_adapter():
        base = record(tuned, tokenizer, probes, max_new_tokens=12)
    # The adapter disabled is the base model: the same tokens, the values within tolerance.
    same = compare(before, base, check_fingerprints=False)
    assert same.verdict.ok, same.render()
    against_base = compare(base, adapted)
    assert against_base.verdict is Verdict.STALE
    assert "adapter 'default' enabled again" in against_base.render()
    # What the adapter did, by values alone (the fingerprints set aside): its answers leave the base model's path.
    assert compare(base, adapted, check_fingerprints=False).verdict is Verdict.REGRESSION

    # Last: the history depends on the TRL release (recorded on trl 1.16; 0.24-1.14 train otherwise), so CI's
    # lowest-versions leg expects this one assertion to fail as a regression after every check above has held.
    assert history == genguard_snapshot
