"""Bad input to record() and finetune() gets a ValueError naming the argument, the value and the limit, before any of
it reaches transformers or torch (where it crashed deep inside, or was recorded as if it were fine: issue 12 item 6).
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers
from fake_torch import FakeTorch

import pytest_genguard
from pytest_genguard import finetune
from pytest_genguard.hf.inputs import torch_device
from pytest_genguard.hf.record import generate_from_ids, record
from pytest_genguard.hf.tiny import ARCHS, tiny_model, tiny_tokenizer

LONG = "the " * 300  # 301 tokens with the tiny tokenizer; the tiny gpt2 and llama attend to 256 positions


@pytest.fixture(scope="module")
def models() -> dict[str, Any]:
    return {arch: tiny_model(arch) for arch in ARCHS}


def first_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    return str(exc.value).splitlines()[0]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("prompts", [[""], ["", "the quick"], ["the quick", ""]], ids=["alone", "first", "second"])
def test_an_empty_prompt_is_refused_alone_and_in_a_batch(
    models: dict[str, Any], tokenizer: Any, arch: str, prompts: list[str]
) -> None:
    # Before: alone "cannot reshape tensor of 0 elements" (llama, t5) or an IndexError (gpt2); in a batch it was
    # recorded, its "generation" the model's guesses after nothing but padding.
    index = prompts.index("")
    with pytest.raises(ValueError, match=rf"^record\(\): prompt {index} \(''\) has no tokens; generation needs"):
        record(models[arch], tokenizer, prompts, max_new_tokens=3)


@pytest.mark.parametrize(("arch", "attribute"), [("gpt2", "n_positions"), ("llama", "max_position_embeddings")])
def test_a_prompt_beyond_the_context_is_refused(
    models: dict[str, Any], tokenizer: Any, arch: str, attribute: str
) -> None:
    context = getattr(models[arch].config, attribute)
    n = len(tokenizer(LONG)["input_ids"])
    assert n > context  # the premise
    with pytest.raises(ValueError) as info:
        record(models[arch], tokenizer, ["a", LONG], max_new_tokens=3)
    assert first_line(info) == (
        f"record(): prompt 1 has {n} tokens; {arch}'s context is {context} positions (config.{attribute}): "
        "shorten the prompt."
    )


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_prompt_plus_new_tokens_beyond_the_context_is_refused_and_the_limit_itself_works(
    models: dict[str, Any], tokenizer: Any, arch: str
) -> None:
    model = models[arch]
    context = model.config.max_position_embeddings  # gpt2 maps it to n_positions
    prompt = "the " * 200
    n = len(tokenizer(prompt)["input_ids"])
    room = context - n
    with pytest.raises(ValueError) as info:
        record(model, tokenizer, prompt, max_new_tokens=room + 1)
    assert first_line(info).startswith(
        f"record(): max_new_tokens={room + 1} after prompt 0's {n} tokens needs {context + 1} positions; "
        f"{arch}'s context is {context} positions"
    )
    assert f"lower max_new_tokens to {room} or less" in first_line(info)
    trace = record(model, tokenizer, prompt, max_new_tokens=room)  # exactly the context: allowed, and it runs
    assert len(trace[0].steps) <= room


def test_t5_has_no_position_limit_so_a_long_prompt_is_recorded(models: dict[str, Any], tokenizer: Any) -> None:
    trace = record(models["t5"], tokenizer, LONG, max_new_tokens=2)  # relative position buckets: no context limit
    assert len(trace[0].prompt_ids) == len(tokenizer(LONG)["input_ids"])


BAD_ARGUMENTS = [
    (
        {"max_new_tokens": 2.5},
        "record(): max_new_tokens must be an integer >= 1, got 2.5 (for example max_new_tokens=2).",
    ),
    ({"max_new_tokens": 0}, "record(): max_new_tokens must be an integer >= 1, got 0."),
    ({"max_new_tokens": -3}, "record(): max_new_tokens must be an integer >= 1, got -3."),
    ({"max_new_tokens": True}, "record(): max_new_tokens must be an integer >= 1, got True."),
    ({"max_new_tokens": "4"}, "record(): max_new_tokens must be an integer >= 1, got '4'."),
    ({"top_k": 0}, "record(): top_k must be an integer >= 1, got 0."),
    ({"top_k": -1}, "record(): top_k must be an integer >= 1, got -1."),
    ({"top_k": 2.0}, "record(): top_k must be an integer >= 1, got 2.0 (for example top_k=2)."),
    ({"top_k": None}, "record(): top_k must be an integer >= 1, got None."),
    ({"top_k": False}, "record(): top_k must be an integer >= 1, got False."),
    ({"seed": 1.5}, "record(): seed must be an integer or None, got 1.5."),
    ({"seed": "7"}, "record(): seed must be an integer or None, got '7'."),
    (
        {"seed": 2**70},  # before: torch's "Overflow when unpacking long"
        "record(): seed must be an integer from -2**63 to 2**64 - 1 (torch's seed range) or None, got "
        "1180591620717411303424.",
    ),
    (
        {"seed": -(2**63) - 1},
        "record(): seed must be an integer from -2**63 to 2**64 - 1 (torch's seed range) or None, got "
        "-9223372036854775809.",
    ),
    (
        {"attention_mask": torch.ones(1, 2, dtype=torch.long)},  # before: TypeError "got multiple values"
        "record(): attention_mask= is made by record() from the prompts (it tokenizes and pads them itself); "
        "leave it out.",
    ),
    (
        {"input_ids": torch.ones(1, 2, dtype=torch.long)},
        "record(): input_ids= is made by record() from the prompts (it tokenizes and pads them itself); leave it out.",
    ),
    (
        {"do_sample": True},  # before: recorded, then "diverges at step 0" in every later run
        "record(): do_sample=True samples, but no seed= was given: each run would draw other tokens, so the trace "
        "could never be checked. Pass seed=<an integer> (record(..., seed=0)), or do_sample=False.",
    ),
    ({"num_beams": 0}, "record(): num_beams must be an integer >= 1, got 0."),
    ({"min_new_tokens": -2}, "record(): min_new_tokens must be an integer >= 0, got -2."),
    ({"no_repeat_ngram_size": -1}, "record(): no_repeat_ngram_size must be an integer >= 0, got -1."),
    ({"repetition_penalty": float("nan")}, "record(): repetition_penalty must be a finite number > 0, got nan."),
    ({"do_sample": True, "top_p": 2.0}, "record(): top_p must be in (0, 1], got 2.0."),
    ({"do_sample": True, "top_p": 0.0}, "record(): top_p must be in (0, 1], got 0.0."),
    ({"do_sample": True, "min_p": -0.1}, "record(): min_p must be in [0, 1], got -0.1."),
    (
        {"do_sample": True, "temperature": float("inf")},
        "record(): temperature must be a finite number > 0 when sampling, got inf.",
    ),
    ({"num_beams": 2, "length_penalty": "x"}, "record(): length_penalty must be a number, got 'x'."),
    (
        {"generation_config": {"do_sample": True}},
        "record(): generation_config must be a transformers GenerationConfig, got dict {'do_sample': True}; pass "
        "GenerationConfig(...), or the settings themselves as keyword arguments.",
    ),
    (
        {"logits_processor": [1]},
        "record(): logits_processor[0] is int 1, which cannot be called; pass LogitsProcessor objects.",
    ),
    ({"prompts": None}, "record(): prompts must be a string or a list of strings, got NoneType None."),
    ({"prompts": b"the"}, "record(): prompts must be a string or a list of strings, got bytes b'the'."),
    ({"prompts": []}, "record(): prompts is empty; pass one prompt or a list of prompts."),
    (
        {"prompts": ["a", 7]},
        "record(): prompt 1 is int 7; a prompt is a string, a list of token ids, or a conversation (a list of "
        '{"role": ..., "content": ...} messages).',
    ),
]


@pytest.mark.parametrize(
    ("kwargs", "message"), BAD_ARGUMENTS, ids=[",".join(f"{k}={v!r}" for k, v in a.items()) for a, _ in BAD_ARGUMENTS]
)
def test_a_bad_argument_is_named_with_its_value_and_limit(
    models: dict[str, Any], tokenizer: Any, kwargs: dict[str, Any], message: str
) -> None:
    args: dict[str, Any] = {"prompts": ["the quick"], "max_new_tokens": 2, **kwargs}
    prompts = args.pop("prompts")
    with pytest.raises(ValueError) as info:
        record(models["gpt2"], tokenizer, prompts, **args)
    assert first_line(info) == message


def test_a_single_processor_or_criterion_not_in_a_list_is_refused(models: dict[str, Any], tokenizer: Any) -> None:
    # Before: "object of type 'Halve' has no len()" from inside generate().
    class Halve(transformers.LogitsProcessor):
        def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
            return scores / 2  # type: ignore[return-value]

    with pytest.raises(
        ValueError,
        match=r"^record\(\): logits_processor must be a list \(LogitsProcessorList\(\[\.\.\.\]\)\), got Halve ",
    ):
        record(models["gpt2"], tokenizer, "the", max_new_tokens=2, logits_processor=Halve())
    with pytest.raises(ValueError, match=r"^record\(\): stopping_criteria must be a list \(StoppingCriteriaList"):
        record(models["gpt2"], tokenizer, "the", max_new_tokens=2, stopping_criteria=lambda *a, **k: False)


def test_settings_that_act_only_when_sampling_are_not_checked_in_greedy_decoding(
    models: dict[str, Any], tokenizer: Any
) -> None:
    # temperature=0 with greedy decoding is common and harmless: not an error, and not recorded (inactive).
    trace = record(models["gpt2"], tokenizer, "the", max_new_tokens=2, temperature=0.0, top_p=2.0)
    assert trace.settings["temperature"] is None and trace.settings["top_p"] is None


def test_integer_like_values_are_stored_as_plain_ints(models: dict[str, Any], tokenizer: Any) -> None:
    np = pytest.importorskip("numpy")  # numpy's integers are what array code hands over
    trace = record(models["gpt2"], tokenizer, "the", max_new_tokens=np.int64(2), top_k=np.int32(3))
    assert trace.settings["max_new_tokens"] == 2 and type(trace.settings["max_new_tokens"]) is int
    assert trace.settings["record_top_k"] == 3 and type(trace.settings["record_top_k"]) is int


def test_a_tokenizer_from_another_model_is_refused(models: dict[str, Any], tokenizer: Any) -> None:
    config = copy.deepcopy(models["llama"].config)
    config.vocab_size = 100  # the tiny tokenizer's ids go up to 767
    small = transformers.AutoModelForCausalLM.from_config(config)
    with pytest.raises(ValueError) as info:
        record(small, tokenizer, "the quick", max_new_tokens=2)  # before: IndexError "index out of range in self"
    assert re.fullmatch(
        r"record\(\): prompt 0 has token id \d+, but llama's input embeddings hold ids 0 to 99; the tokenizer does "
        r"not belong to this model: pass the model's own tokenizer\.",
        first_line(info),
    )


def test_a_model_on_the_meta_device_is_refused(models: dict[str, Any], tokenizer: Any) -> None:
    with torch.device("meta"):
        empty = transformers.AutoModelForCausalLM.from_config(models["llama"].config)
    with pytest.raises(ValueError, match=r"^record\(\): the model \(LlamaForCausalLM\) has weights on the meta device"):
        record(empty, tokenizer, "the quick", max_new_tokens=2)


def test_a_tokenizer_without_a_pad_token_records_a_batch_as_one_with_it(models: dict[str, Any]) -> None:
    # GPT-2's own tokenizer has no pad token; before, a batch failed inside the tokenizer ("Asking to pad but the
    # tokenizer does not have a padding token"). The padding is masked, so the pad id does not matter.
    padded = tiny_tokenizer()
    unpadded = tiny_tokenizer()
    unpadded.pad_token = None
    assert unpadded.pad_token_id is None
    prompts = ["the quick", "once upon a time there was", "a"]
    for arch in ARCHS:
        with_pad = record(models[arch], padded, prompts, max_new_tokens=4)
        without = record(models[arch], unpadded, prompts, max_new_tokens=4)
        assert [p.prompt_ids for p in without] == [p.prompt_ids for p in with_pad]
        assert [p.steps for p in without] == [p.steps for p in with_pad], arch
    assert unpadded.pad_token_id is None  # the user's tokenizer is left as it was


def test_a_tokenizer_without_a_pad_token_records_a_single_prompt(models: dict[str, Any]) -> None:
    # Before: "Asking to pad but the tokenizer does not have a padding token" (one prompt needs no padding).
    unpadded = tiny_tokenizer()
    unpadded.pad_token = None
    for arch in ARCHS:
        alone = record(models[arch], unpadded, "the quick", max_new_tokens=3)
        assert alone.prompts[0].prompt_ids == tuple(tiny_tokenizer()("the quick")["input_ids"])
        assert alone.prompts[0].steps == record(models[arch], tiny_tokenizer(), "the quick", max_new_tokens=3)[0].steps


@pytest.mark.parametrize("tokenizer", [None, "gpt2", 3])
def test_something_that_is_not_a_tokenizer_is_named(models: dict[str, Any], tokenizer: Any) -> None:
    # Before: AttributeError "'NoneType' object has no attribute ...".
    with pytest.raises(ValueError) as info:
        record(models["gpt2"], tokenizer, "the quick", max_new_tokens=2)
    assert first_line(info) == (
        f"record(): tokenizer must be a transformers tokenizer (the model's own: AutoTokenizer.from_pretrained(...)), "
        f"got {type(tokenizer).__name__} {tokenizer!r}."
    )


def test_a_model_whose_generation_config_samples_needs_a_seed(models: dict[str, Any], tokenizer: Any) -> None:
    # A hub model's generation_config.json often samples: recording it without a seed is refused the same way.
    model = copy.deepcopy(models["gpt2"])
    model.generation_config.do_sample = True
    with pytest.raises(ValueError, match=r"^record\(\): do_sample=True samples, but no seed= was given"):
        record(model, tokenizer, "the quick", max_new_tokens=2)
    assert record(model, tokenizer, "the quick", max_new_tokens=2, seed=0).settings["mode"] == "sample"


# ---------------------------------------------------------------------------------------------------- finetune


@pytest.mark.parametrize(
    ("device", "message"),
    [
        ("bogus", "finetune(): device='bogus' is not a torch device (Expected one of "),
        ("meta", "finetune(): device='meta' holds shapes without data; a fine-tuned model needs real weights"),
        ("cuda:3", "finetune(): device='cuda:3': CUDA is not available here (torch "),
        (2.5, "finetune(): device=2.5 is not a torch device ("),
    ],
)
def test_finetune_refuses_a_device_it_cannot_use_before_training(tmp_path: Path, device: Any, message: str) -> None:
    if str(device).startswith("cuda") and torch.cuda.is_available():
        pytest.skip("this machine has CUDA; the fake-CUDA test below covers the index check")
    with pytest.raises(ValueError) as info:
        finetune("gpt2", steps=2, cache_dir=tmp_path, progress=False, device=device)
    assert first_line(info).startswith(message)
    assert list(tmp_path.iterdir()) == []  # refused before anything was trained or cached


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"seed": 2.5}, "finetune(seed=2.5): must be an integer."),  # was trained (and cached) as seed 2
        ({"seed": True}, "finetune(seed=True): must be an integer."),
        ({"learning_rate": float("inf")}, "finetune(learning_rate=inf): must be a finite number > 0."),
        ({"learning_rate": "1e-3"}, "finetune(learning_rate='1e-3'): must be a finite number > 0."),
    ],
)
def test_finetune_refuses_a_seed_or_learning_rate_it_would_have_bent(
    tmp_path: Path, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError) as info:
        finetune("gpt2", steps=2, cache_dir=tmp_path, progress=False, **kwargs)
    assert first_line(info) == message
    assert list(tmp_path.iterdir()) == []


def test_a_cuda_device_index_beyond_the_devices_is_named() -> None:
    with pytest.raises(ValueError) as info:
        torch_device("cuda:3", "finetune()", FakeTorch(devices=1))
    assert first_line(info) == (
        "finetune(): device='cuda:3': device index 3 is out of range; this machine has 1 cuda device(s) (0 to 0)."
    )
    assert str(torch_device("cuda:1", "finetune()", FakeTorch(devices=2))) == "cuda:1"
    with pytest.raises(ValueError, match=r"CUDA is not available here .*finds no usable CUDA device"):
        torch_device("cuda", "finetune()", FakeTorch(available=False))


def test_cpu_devices_and_none_are_accepted() -> None:
    assert torch_device(None, "finetune()") == torch.device("cpu")
    assert torch_device("cpu", "finetune()") == torch.device("cpu")
    assert torch_device(torch.device("cpu"), "finetune()") == torch.device("cpu")


def test_every_entry_point_checks_prompts_with_one_validator_naming_itself(
    models: dict[str, Any], tokenizer: Any
) -> None:
    model = models["gpt2"]
    calls: dict[str, Any] = {
        "assert_deterministic": lambda: pytest_genguard.assert_deterministic(model, tokenizer, [7], max_new_tokens=2),
        "generate_from_ids()": lambda: generate_from_ids(model, tokenizer, [7], [[1]], max_new_tokens=2),
    }
    for where, call in calls.items():
        with pytest.raises(ValueError, match=rf"^{re.escape(where)}: prompt 0 is int 7, not a string"):
            call()
    # record() and the recorder's probes take every prompt form (`[7]` is one prompt of token ids): one validator.
    forms: dict[str, Any] = {
        "record()": lambda: pytest_genguard.record(model, tokenizer, ["a", 7], max_new_tokens=2),
        "GenerationRecorder()": lambda: pytest_genguard.GenerationRecorder(["a", 7]),
    }
    for where, call in forms.items():
        with pytest.raises(ValueError, match=rf"^{re.escape(where)}: prompt 1 is int 7; a prompt is a string, a list"):
            call()
