"""Tiny offline models and tokenizer: deterministic, small, and usable by generate() without warnings."""

from __future__ import annotations

import json
import logging
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from pytest_genguard.hf import tiny  # noqa: E402
from pytest_genguard.hf.tiny import (  # noqa: E402
    ARCHS,
    build_tokenizer_json,
    corpus_texts,
    finetune_texts,
    is_encoder_decoder,
    probe_prompts,
    tiny_model,
    tiny_tokenizer,
)

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast


@pytest.fixture(scope="module")
def tok() -> PreTrainedTokenizerFast:
    return tiny_tokenizer()


def _byte_decoder() -> dict[str, int]:
    """Inverse of the GPT-2 byte-level alphabet: printable stand-in character -> original byte."""
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


def _token_bytes(token: str) -> bytes:
    decoder = _byte_decoder()
    return bytes(decoder[ch] for ch in token)


def _is_valid_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _state_dicts_equal(a: Any, b: Any) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.fixture
def transformers_log() -> Iterator[list[str]]:
    """Messages transformers logs at WARNING or above (its logger does not propagate to caplog)."""
    from transformers.utils import logging as hf_logging

    # warning_once() is memoised: clear it so a warning seen earlier in the process shows up again.
    cache_clear = getattr(getattr(hf_logging, "warning_once", None), "cache_clear", None)
    if cache_clear is not None:
        cache_clear()
    messages: list[str] = []

    class _Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    handler = _Collect(level=logging.WARNING)
    logger = logging.getLogger("transformers")
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity(logging.WARNING)
    logger.addHandler(handler)
    try:
        yield messages
    finally:
        logger.removeHandler(handler)
        hf_logging.set_verbosity(verbosity)


# --- data files -------------------------------------------------------------------------------------


def test_finetune_sentences_are_eight_with_distinct_two_word_prefixes() -> None:
    sentences = finetune_texts()
    assert len(sentences) == 8
    assert all(s.endswith(".") for s in sentences)
    prefixes = {" ".join(s.split()[:2]) for s in sentences}
    assert len(prefixes) == 8


def test_probe_prompts_are_prefixes_of_distinct_finetune_sentences() -> None:
    prompts = probe_prompts()
    sentences = finetune_texts()
    assert len(prompts) == 4
    matched = {s for p in prompts for s in sentences if s.startswith(p + " ")}
    assert len(matched) == 4


def test_corpus_starts_with_the_finetune_sentences_and_contains_non_ascii_lines() -> None:
    corpus = corpus_texts()
    assert corpus[:8] == finetune_texts()
    assert 300 <= len(corpus) <= 600
    text = "\n".join(corpus)
    for needle in ("café", "naïve", "€5", "🙂", "猫"):
        assert needle in text


# --- tokenizer --------------------------------------------------------------------------------------


def test_rebuilding_the_tokenizer_from_the_shipped_corpus_reproduces_the_shipped_file() -> None:
    shipped = json.loads(tiny._shipped_tokenizer_path().read_text(encoding="utf-8"))
    rebuilt = json.loads(build_tokenizer_json(tiny._training_texts()))

    def merges(doc: dict[str, Any]) -> list[str]:
        # tokenizers stores merges as "a b" strings or [a, b] pairs depending on version.
        return [m if isinstance(m, str) else " ".join(m) for m in doc["model"]["merges"]]

    assert rebuilt["model"]["vocab"] == shipped["model"]["vocab"], (
        "data/tokenizer.json differs from a rebuild: run `python -m pytest_genguard.hf.tiny`"
    )
    assert merges(rebuilt) == merges(shipped)
    assert rebuilt["added_tokens"] == shipped["added_tokens"]
    assert shipped["post_processor"] is None


def test_special_tokens_are_pad_bos_eos_unk_with_ids_0_to_3(tok: PreTrainedTokenizerFast) -> None:
    assert (tok.pad_token, tok.bos_token, tok.eos_token, tok.unk_token) == ("<pad>", "<s>", "</s>", "<unk>")
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id, tok.unk_token_id) == (0, 1, 2, 3)
    assert tok.padding_side == "left"
    assert len(tok) == tiny.VOCAB_SIZE


def test_tokenizer_adds_no_special_tokens_and_returns_no_token_type_ids(
    tok: PreTrainedTokenizerFast,
) -> None:
    enc = tok(["the quick", "once upon a"], padding=True)
    assert set(enc.keys()) == {"input_ids", "attention_mask"}
    assert tok.decode(enc["input_ids"][0], skip_special_tokens=True) == "the quick"
    unpadded = tok("the quick")["input_ids"]
    assert not {0, 1, 2, 3} & set(unpadded)


def test_tokenizer_round_trips_non_ascii_corpus_lines(tok: PreTrainedTokenizerFast) -> None:
    lines = [line for line in corpus_texts() if not line.isascii()]
    assert len(lines) >= 10
    for line in lines:
        ids = tok(line)["input_ids"]
        assert tok.unk_token_id not in ids
        assert tok.decode(ids) == line


def test_vocab_has_byte_tokens_that_are_not_valid_utf8_alone(tok: PreTrainedTokenizerFast) -> None:
    ids = tok("the word for cat is 猫.")["input_ids"]
    pieces = [_token_bytes(t) for t in tok.convert_ids_to_tokens(ids)]
    assert b"".join(pieces).decode("utf-8") == "the word for cat is 猫."
    invalid = [(i, p) for i, p in zip(ids, pieces, strict=True) if not _is_valid_utf8(p)]
    assert invalid, pieces
    token_id, piece = invalid[0]
    assert "\N{REPLACEMENT CHARACTER}" in tok.decode([token_id])
    assert piece[0] >= 0x80


def test_tiny_tokenizer_returns_independent_copies() -> None:
    first = tiny_tokenizer()
    first.padding_side = "right"
    assert tiny_tokenizer().padding_side == "left"


# --- models -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ARCHS)
def test_each_arch_builds_in_eval_mode_under_one_million_parameters(arch: str, tok: PreTrainedTokenizerFast) -> None:
    model = tiny_model(arch)
    n_params = sum(p.numel() for p in model.parameters())
    assert n_params < 1_000_000
    assert not model.training
    embeddings: Any = model.get_input_embeddings()
    assert embeddings.weight.shape[0] == len(tok)
    assert model.config.vocab_size == len(tok)
    gen = model.generation_config
    assert (gen.pad_token_id, gen.eos_token_id) == (tok.pad_token_id, tok.eos_token_id)
    assert model.config.pad_token_id == tok.pad_token_id
    assert is_encoder_decoder(model) is (arch == "t5")
    if arch == "t5":
        assert gen.decoder_start_token_id == tok.pad_token_id
    else:
        assert gen.bos_token_id == tok.bos_token_id


@pytest.mark.parametrize("arch", ARCHS)
def test_same_seed_gives_identical_weights_and_different_seed_does_not(arch: str) -> None:
    assert _state_dicts_equal(tiny_model(arch, seed=3), tiny_model(arch, seed=3))
    assert not _state_dicts_equal(tiny_model(arch, seed=3), tiny_model(arch, seed=4))


def test_building_a_model_leaves_the_callers_rng_untouched() -> None:
    torch.manual_seed(1234)
    expected = torch.rand(4)
    torch.manual_seed(1234)
    tiny_model("llama", seed=7)
    assert torch.equal(torch.rand(4), expected)
    assert torch.initial_seed() == 1234


def test_unknown_arch_error_names_the_argument_and_lists_valid_archs() -> None:
    with pytest.raises(ValueError, match=r"arch='bert'") as excinfo:
        tiny_model("bert")
    for arch in ARCHS:
        assert arch in str(excinfo.value)


def test_unknown_config_override_is_a_type_error_naming_the_key() -> None:
    with pytest.raises(TypeError, match="no_such_setting"):
        tiny_model("gpt2", no_such_setting=1)


def test_config_overrides_reach_the_config_including_aliases() -> None:
    assert tiny_model("gpt2", hidden_size=32).config.n_embd == 32
    assert tiny_model("llama", num_hidden_layers=1).config.num_hidden_layers == 1


def test_dropout_stays_on_so_train_mode_changes_outputs(tok: PreTrainedTokenizerFast) -> None:
    model = tiny_model("gpt2")
    ids = torch.tensor([tok("the quick brown fox")["input_ids"]])
    with torch.no_grad():
        a, b = model(input_ids=ids).logits, model(input_ids=ids).logits
        assert torch.equal(a, b)
        model.train()
        assert not torch.equal(model(input_ids=ids).logits, a)


def test_dtype_argument_casts_the_weights() -> None:
    assert tiny_model("llama", dtype=torch.bfloat16).dtype == torch.bfloat16
    assert tiny_model("gpt2", dtype="float16").dtype == torch.float16
    with pytest.raises(ValueError, match="dtype"):
        tiny_model("gpt2", dtype="int8")


def _supports(arch: str, impl: str) -> bool:
    try:
        tiny_model(arch, attn_implementation=impl)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("arch", ARCHS)
def test_eager_and_sdpa_attention_both_construct_with_the_same_weights(arch: str, tok: PreTrainedTokenizerFast) -> None:
    eager: Any = tiny_model(arch, attn_implementation="eager")
    if not _supports(arch, "sdpa"):
        pytest.skip(f"this transformers version has no sdpa attention for {arch}")
    sdpa: Any = tiny_model(arch, attn_implementation="sdpa")
    assert eager.config._attn_implementation == "eager"
    assert sdpa.config._attn_implementation == "sdpa"
    assert _state_dicts_equal(eager, sdpa)
    enc = tok(["the quick brown fox"], return_tensors="pt")
    kwargs: dict[str, Any] = dict(enc)
    if is_encoder_decoder(eager):
        kwargs["decoder_input_ids"] = torch.zeros((1, 1), dtype=torch.long)
    with torch.no_grad():
        torch.testing.assert_close(sdpa(**kwargs).logits, eager(**kwargs).logits, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("arch", ARCHS)
def test_generate_runs_with_the_tokenizer_without_pad_or_attention_mask_warnings(
    arch: str, tok: PreTrainedTokenizerFast, transformers_log: list[str]
) -> None:
    model: Any = tiny_model(arch)  # generate() types as "Tensor" via nn.Module.__getattr__ in stubs
    enc = tok(["the quick", "once upon a"], return_tensors="pt", padding=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = model.generate(**enc, max_new_tokens=4, do_sample=False)
    messages = [str(w.message) for w in caught] + transformers_log
    suspicious = [m for m in messages if "pad" in m.lower() or "attention" in m.lower()]
    assert not suspicious, messages
    assert out.shape[0] == 2
    if not is_encoder_decoder(model):
        assert torch.equal(out[:, : enc["input_ids"].shape[1]], enc["input_ids"])


MODEL_PACKAGES = """
import json, sys
from pytest_genguard.hf.tiny import tiny_model
tiny_model(sys.argv[1])
print(json.dumps(sorted({k.split(".")[2] for k in sys.modules if k.startswith("transformers.models.")} - {"auto"})))
"""


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_a_tiny_model_imports_only_its_own_architecture(arch: str) -> None:
    """Building a gpt2 imported the llama and t5 configs (and their packages) too (issue 33;
    `benchmarks/finetune_startup.py` measures finetune() from a warm cache against from_pretrained of the same
    weights)."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", MODEL_PACKAGES, arch], capture_output=True, text=True, check=True, timeout=300
    )
    assert json.loads(done.stdout.splitlines()[-1]) == [arch]
