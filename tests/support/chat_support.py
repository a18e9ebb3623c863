"""A chat template for the shipped tiny tokenizer (no hub): Llama-3 style, it writes ``{{ bos_token }}`` itself; and
a tokenizer copy that adds BOS on its own (as Llama 3's does): the pair that encoded a rendered prompt as [1, 1, ...]
"""

from __future__ import annotations

from typing import Any

from tokenizers.processors import TemplateProcessing

from pytest_genguard.hf.tiny import tiny_tokenizer

TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}{{ eos_token }}\n"
    "{% endfor %}"
    "{% if tools is defined and tools %}<|tools|>{{ tools | tojson }}\n{% endif %}"
    "{% if add_generation_prompt %}<|assistant|>\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think></think>\n{% endif %}"
    "{% endif %}"
)

CONVERSATION = [
    {"role": "system", "content": "You answer in one word."},
    {"role": "user", "content": "the quick brown fox"},
]


def chat_tokenizer(template: str = TEMPLATE, *, adds_bos: bool = True) -> Any:
    """The tiny tokenizer with `template` as its chat template, adding BOS to every encoded text when `adds_bos`."""
    tokenizer = tiny_tokenizer()
    tokenizer.chat_template = template
    if adds_bos:
        bos = tokenizer.bos_token
        tokenizer.backend_tokenizer.post_processor = TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tokenizer.bos_token_id)]
        )
    return tokenizer
