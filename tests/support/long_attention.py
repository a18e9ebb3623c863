"""A bfloat16 model's attention over a prompt past 300 tokens, through record(), verify() and fidelity(): what torch
2.13's CPU flash attention (SDPA) cannot do under ``ATEN_CPU_CAPABILITY=avx2`` on a CPU with AVX-512
(`pytest_genguard.hf.kernel_limits`), and eager attention can.

Run as a script (``python tests/support/long_attention.py``) it prints, as JSON, the kernel set torch runs and what
each call gave ("ok", or the error's type and message) with SDPA, with eager attention, and with SDPA raising
torch's own message (as it does on such a CPU, which this one may not be): what the tests check in a subprocess under
another kernel set.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterator
from typing import Any

PROMPT_TOKENS = 320
TEXT = "the quick brown fox jumps over the lazy dog while tests keep models honest about what they decode. "


def model(attention: str) -> Any:
    """The tiny llama in bfloat16 with `attention` ("sdpa", "eager"), long enough for the prompt."""
    import torch

    from pytest_genguard.hf.tiny import tiny_model

    return tiny_model("llama", dtype=torch.bfloat16, attn_implementation=attention, max_position_embeddings=1024)


def prompt(tokenizer: Any) -> list[list[int]]:
    """One prompt of `PROMPT_TOKENS` token ids."""
    ids: list[int] = tokenizer(TEXT * 20)["input_ids"]
    assert len(ids) >= PROMPT_TOKENS
    return [ids[:PROMPT_TOKENS]]


def _outcome(call: Callable[[], Any]) -> str:
    try:
        call()
    except Exception as exc:  # what the caller would meet: its type and message
        return f"{type(exc).__name__}: {exc}"
    return "ok"


def outcomes(tested: Any, tokenizer: Any, reference: Any) -> dict[str, str]:
    """What record(), verify() and fidelity() (the model as its own reference, exact) give for `tested`, along
    `reference` (a trace recorded with the same weights)."""
    import pytest_genguard as gg

    return {
        "record": _outcome(lambda: gg.record(tested, tokenizer, prompt(tokenizer), max_new_tokens=2, top_k=5)),
        "verify": _outcome(lambda: gg.verify(tested, tokenizer, reference)),
        "fidelity": _outcome(lambda: gg.fidelity(tested, tokenizer, reference, reference_model=tested)),
    }


@contextlib.contextmanager
def torch_pack_failure() -> Iterator[None]:
    """torch's SDPA raising what it raises on a CPU with AVX-512 under the AVX2 kernel set (`TORCH_PACK_ERROR`), for a
    bfloat16 attention of at least 64 queries over 300 keys, whatever this CPU is; any other call runs as it does."""
    import torch

    from pytest_genguard.hf.kernel_limits import TORCH_PACK_ERROR

    real = torch.nn.functional.scaled_dot_product_attention

    def failing(query: Any, key: Any, *args: Any, **kwargs: Any) -> Any:
        if query.dtype == torch.bfloat16 and query.shape[-2] >= 64 and key.shape[-2] >= 300:
            raise RuntimeError(TORCH_PACK_ERROR)
        return real(query, key, *args, **kwargs)

    torch.nn.functional.scaled_dot_product_attention = failing
    try:
        yield
    finally:
        torch.nn.functional.scaled_dot_product_attention = real


def report() -> dict[str, Any]:
    """The kernel set torch runs and what each attention gave (see the module docstring)."""
    import pytest_genguard as gg
    from pytest_genguard.hf.environment import cpu_capability

    tokenizer = gg.tiny_tokenizer()
    eager = model("eager")
    reference = gg.record(eager, tokenizer, prompt(tokenizer), max_new_tokens=2, top_k=5)
    sdpa = model("sdpa")
    found: dict[str, Any] = {"kernel_set": cpu_capability(), "sdpa": outcomes(sdpa, tokenizer, reference)}
    found["eager"] = outcomes(eager, tokenizer, reference)
    with torch_pack_failure():
        found["torch_failure"] = outcomes(sdpa, tokenizer, reference)
    return found


if __name__ == "__main__":
    json.dump(report(), sys.stdout)
    sys.stdout.write("\n")
