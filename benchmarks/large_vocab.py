"""`record()` on a real vocabulary: 151,936 tokens (Qwen 2.5's), 4 prompts x 16 new tokens, one thread.

The README's record() figure is measured on the tiny tokenizer's 768 tokens, where nothing scales with the vocabulary.
Here a tiny Llama-architecture model gets a 151,936-row output layer and a byte-level BPE tokenizer of as many tokens
(151,680 merges, built offline with `tokenizers`: no hub), and these figures are taken:

- record() against a bare ``generate(output_logits=True)`` of the same batch, alternating (the target);
- the first call of each on a fresh model and tokenizer, apart (the fingerprints are computed there; what any first
  call in a process pays, imports and the environment, is paid before by a call on the tiny GPT-2);
- tokenizer_fingerprint() cold (a fresh tokenizer object, nothing memoized) and warm (the same tokenizer again);
- where record()'s extra time goes (the raw-logprob work on generate()'s own output, the weights check);
- record() against generate() at Qwen2.5-0.5B's dimensions (494M parameters, random weights), reported: the tiny
  model is the worst case, its whole network smaller than its output layer.
"""

from __future__ import annotations

from typing import Any

from benchmarks.harness import Result, alternate, ms, repeat, timed

VOCAB = 151_936
TARGET = 1.15
FINGERPRINT_COLD_MS = 150.0
FINGERPRINT_WARM_MS = 1.0
PROMPTS = ["the quick brown fox", "once upon a time", "the train left the station", "she reads a book"]


def big_tokenizer(vocab_size: int) -> Any:
    """A byte-level BPE tokenizer of `vocab_size` tokens (the 256 byte symbols, pad/bos/eos, and merges of a token
    with a byte drawn by a fixed LCG), as `transformers` loads a real one: a deterministic stand-in for Qwen's."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    alphabet = list(bytes_to_unicode().values())
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    merges: list[tuple[str, str]] = []
    tokens = list(alphabet)
    state = 1
    while len(vocab) < vocab_size - 3:
        state = (state * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        new = tokens[(state >> 20) % len(tokens)] + alphabet[(state >> 40) % len(alphabet)]
        if new in vocab or len(new) > 16:
            continue
        vocab[new] = len(vocab)
        merges.append((new[:-1], new[-1]))
        tokens.append(new)
    backend = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<|bos|>", eos_token="<|eos|>", pad_token="<|pad|>"
    )
    tokenizer.padding_side = "left"
    return tokenizer


def _model(tokenizer: Any, vocab_size: int) -> Any:
    from pytest_genguard.hf.tiny import tiny_model

    return tiny_model(
        "llama",
        vocab_size=vocab_size,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )


# Qwen2.5-0.5B's dimensions (494M parameters with its 151,936-token vocabulary), as a Llama with torch's own random
# initialisation: what record() costs where the network, not the output layer, is most of a decoding step.
QWEN_05B = {
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "tie_word_embeddings": True,
}


def _real_sized_model(tokenizer: Any, vocab_size: int, smoke: bool) -> Any:
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    dims = {**QWEN_05B, "num_hidden_layers": 1, "hidden_size": 112, "intermediate_size": 128} if smoke else QWEN_05B
    config = LlamaConfig(
        vocab_size=vocab_size,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        **dims,
    )
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config).eval()


def _real_sized(tokenizer: Any, vocab: int, smoke: bool, recorded: Any, bare: Any) -> tuple[Any, int]:
    """record() against generate() on the Qwen2.5-0.5B-sized model (freed on return: 2 GB), and its size."""
    real = _real_sized_model(tokenizer, vocab, smoke)
    pairs = alternate(lambda: recorded(real, tokenizer), lambda: bare(real, tokenizer), 2 if smoke else 8)
    return pairs, sum(p.numel() for p in real.parameters())


def run(smoke: bool) -> list[Result]:
    import torch

    from pytest_genguard.hf import fingerprint, tokenizer_hash
    from pytest_genguard.hf._generation import Float64LogSoftmax, collect_steps, top_k_of
    from pytest_genguard.hf.record import record

    vocab = 4096 if smoke else VOCAB
    new_tokens = 4 if smoke else 16
    pairs = 2 if smoke else 20
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        tokenizer = big_tokenizer(vocab)

        def recorded(model: Any, tok: Any) -> Any:
            return record(model, tok, PROMPTS, max_new_tokens=new_tokens, top_k=5)

        def bare(model: Any, tok: Any) -> Any:
            batch = tok(PROMPTS, return_tensors="pt", padding=True)
            return model.generate(**batch, max_new_tokens=new_tokens, return_dict_in_generate=True, output_logits=True)

        # First calls: each on its own fresh model and tokenizer (nothing fingerprinted or memoized yet), after one
        # record() of the tiny GPT-2 has paid for what any first call in a process pays (imports, the environment).
        from pytest_genguard.hf.tiny import tiny_model, tiny_tokenizer

        record(tiny_model("gpt2"), tiny_tokenizer(), "the", max_new_tokens=2)
        fresh_model, fresh_tokenizer = _model(tokenizer, vocab), big_tokenizer(vocab)
        first_record, _ = timed(lambda: recorded(fresh_model, fresh_tokenizer))
        fresh_model, fresh_tokenizer = _model(tokenizer, vocab), big_tokenizer(vocab)
        first_bare, _ = timed(lambda: bare(fresh_model, fresh_tokenizer))
        model = _model(tokenizer, vocab)
        paired = alternate(lambda: recorded(model, tokenizer), lambda: bare(model, tokenizer), pairs)
        ratios = paired.ratios
        # Where record()'s extra time goes: the raw-logprob work on generate()'s own output, apart.
        batch = tokenizer(PROMPTS, return_tensors="pt", padding=True)
        out = model.generate(
            **batch, max_new_tokens=new_tokens, return_dict_in_generate=True, output_logits=True, output_scores=True
        )
        rounds = 2 if smoke else 10
        collect = repeat(lambda: collect_steps(out, len(PROMPTS), 5), rounds)
        lse = repeat(lambda: [Float64LogSoftmax.of(step.unsqueeze(0), 5) for step in out.logits], rounds)
        top = repeat(lambda: [top_k_of(step.unsqueeze(0), 5) for step in out.logits], rounds)
        weights = repeat(lambda: fingerprint.model_fingerprint(model), rounds)

        real_pairs, real_parameters = _real_sized(tokenizer, vocab, smoke, recorded, bare)

        fresh = [big_tokenizer(vocab) for _ in range(1 if smoke else 3)]
        cold = []
        for tok in fresh:  # cold: a tokenizer object never fingerprinted (nothing is memoized by content)
            cold.append(timed(lambda tok=tok: tokenizer_hash.tokenizer_fingerprint(tok))[0])
        warm = repeat(lambda: tokenizer_hash.tokenizer_fingerprint(tokenizer), 5 if smoke else 50)
    finally:
        torch.set_num_threads(threads)
    cold_ms = sorted(cold)[len(cold) // 2] * 1000
    met = ratios.median <= TARGET
    details = [
        f"- record() seconds min/median/max: {paired.a.text('{:.4f}')}",
        f"- bare generate(output_logits=True) seconds min/median/max: {paired.b.text('{:.4f}')}",
        f"- first call on a fresh model and tokenizer: record() {ms(first_record)} vs generate() {ms(first_bare)}",
        f"- tokenizer_fingerprint() cold, ms: {', '.join(f'{c * 1000:.1f}' for c in cold)}; warm min/median/max: "
        f"{warm.scaled(1000).text()} ms",
    ]
    extra = paired.a.median - paired.b.median
    details += [
        f"- record()'s extra {ms(extra)} over generate() (medians): collecting the steps {ms(collect.median)} (the "
        f"top-k and the float64 log-sum-exp {ms(lse.median)}, {lse.median / paired.b.median:.1%} of generate(); the "
        f"top-k alone {ms(top.median)}); the model fingerprint {ms(weights.median)} (the weights hash is cached: "
        "this is the check that no weight changed)",
    ]
    label = f"{vocab:,}-token vocabulary, {len(PROMPTS)} prompts x {new_tokens} tokens, 1 thread"
    shape = "a one-layer smoke stand-in" if smoke else "Qwen2.5-0.5B's dimensions, random weights"
    real_label = f"{real_parameters / 1e6:.0f}M parameters ({shape}), {label}"
    return [
        Result(
            key="large_vocab",
            figure=f"record() vs bare generate(output_logits=True), {label}",
            target=f"≤ {TARGET:.2f}×",
            spread=ratios,
            unit="×",
            headline=f"{ratios.median:.2f}×",
            met=met,
            notes=[f"record {ms(paired.a.median)} vs generate {ms(paired.b.median)} ({pairs} alternating pairs)"],
            details=details,
        ),
        Result(
            key="large_vocab",
            figure=f"first record() vs first generate(), fresh model and tokenizer, {label}",
            target="reported",
            spread=None,
            unit="×",
            headline=f"{first_record / first_bare:.2f}×",
            met=None,
            notes=[f"record {ms(first_record)} vs generate {ms(first_bare)} (one call each)"],
        ),
        Result(
            key="large_vocab",
            figure=f"tokenizer_fingerprint(), {vocab:,}-token BPE tokenizer, cold / warm",
            target=f"≤ {FINGERPRINT_COLD_MS:.0f} ms cold, ≤ {FINGERPRINT_WARM_MS:.0f} ms warm",
            spread=warm.scaled(1000),
            unit=" ms",
            headline=f"{cold_ms:.0f} ms cold, {warm.median * 1000:.3f} ms warm",
            met=cold_ms <= FINGERPRINT_COLD_MS and warm.median * 1000 <= FINGERPRINT_WARM_MS,
            notes=["cold: a tokenizer object never fingerprinted; warm: the same tokenizer again"],
        ),
        Result(
            key="large_vocab",
            figure=f"record() vs bare generate(output_logits=True), {real_label}",
            target="reported",
            spread=real_pairs.ratios,
            unit="×",
            headline=f"{real_pairs.ratios.median:.2f}×",
            met=None,
            notes=[
                f"record {ms(real_pairs.a.median)} vs generate {ms(real_pairs.b.median)} "
                f"({len(real_pairs.ratios.samples)} alternating pairs): the same per-logit work as the tiny model's, "
                "beside a network that is most of each step"
            ],
        ),
    ]
