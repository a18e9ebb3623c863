"""The forms a prompt may take besides text: token ids, and conversations rendered with the tokenizer's chat template.

A conversation (a list of ``{"role", "content"}`` messages) is encoded exactly as
``tokenizer.apply_chat_template(messages, tokenize=True)`` encodes it: the template's text tokenized without the
tokenizer's own special tokens, so a Llama-3-style template that writes ``{{ bos_token }}`` gives one BOS, not two
(rendering to text and tokenizing that adds a second). ``add_generation_prompt`` (True unless told otherwise: the model
is to answer) and the template's keyword arguments (tools, documents, enable_thinking, ...) are recorded in the trace's
settings as ``chat_template_kwargs``; the messages are kept in the trace so failures and reports show the conversation.

Token ids are taken as they are (no tokenizer involved); the trace's prompt text is their decoded form.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_genguard.core import validation
from pytest_genguard.core.jsontext import JSONScalar
from pytest_genguard.core.trace import CHAT_SETTING, GenerationTrace
from pytest_genguard.core.validation import short
from pytest_genguard.hf.decoding_settings import readable_setting

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = [
    "CHAT_SETTING",
    "Encoded",
    "Form",
    "chat_kwargs",
    "checked",
    "encode",
    "has_conversation",
    "ids_again",
    "recorded_forms",
]


Form = str | tuple[int, ...] | tuple[dict[str, Any], ...]
"""One prompt: text, token ids, or a conversation."""


def _is_ids(value: Any) -> bool:
    return (
        isinstance(value, (list, tuple))
        and bool(value)
        and all(isinstance(i, numbers.Integral) and not isinstance(i, bool) for i in value)
    )


def _is_conversation(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and bool(value) and all(isinstance(m, Mapping) for m in value)


def checked(prompts: Any, *, where: str) -> tuple[list[str], list[Form] | None]:
    """The prompts as `validation.prompt_list` gives them when every one is text (forms None: the text path, as
    before); otherwise placeholders and each prompt's form. One list of ids or one conversation is one prompt."""
    if _is_ids(prompts) or _is_conversation(prompts):
        prompts = [prompts]
    items = list(prompts) if isinstance(prompts, (list, tuple)) else None
    if items is None or all(isinstance(p, str) for p in items):
        return validation.prompt_list(prompts, where=where), None
    forms: list[Form] = []
    for index, item in enumerate(items):
        if isinstance(item, str):
            forms.append(validation.prompt_list(item, where=f"{where} (prompt {index})")[0])
        elif _is_ids(item):
            forms.append(tuple(int(i) for i in item))
        elif _is_conversation(item):
            forms.append(tuple(_message(m, index, n, where) for n, m in enumerate(item)))
        else:
            raise ValueError(
                f"{where}: prompt {index} is {type(item).__name__} {short(item)}; a prompt is a string, a list of "
                'token ids, or a conversation (a list of {"role": ..., "content": ...} messages).'
            )
    return [_placeholder(f) for f in forms], forms


def _message(message: Mapping[str, Any], index: int, n: int, where: str) -> dict[str, Any]:
    if not isinstance(message.get("role"), str):
        raise ValueError(
            f"{where}: prompt {index}, message {n} has no 'role' ({short(dict(message))}); a conversation is a list "
            'of {"role": "user", "content": "..."} messages.'
        )
    return dict(message)


def has_conversation(forms: Sequence[Form] | None) -> bool:
    """Whether any prompt is a conversation."""
    return any(f and isinstance(f, tuple) and isinstance(f[0], dict) for f in forms or ())


def _placeholder(form: Form) -> str:
    """A prompt's text for the argument checks made before it is encoded (the trace stores the encoded text)."""
    if isinstance(form, str):
        return form
    if form and isinstance(form[0], dict):
        return str(form[-1].get("content", ""))
    return f"{len(form)} token ids"


def chat_kwargs(given: Mapping[str, Any] | None, forms: Sequence[Form] | None, *, where: str) -> dict[str, Any]:
    """The chat template's keyword arguments: ``add_generation_prompt=True`` unless given, then what was given.
    Given for `forms` of which none is a conversation, they are refused: they would be ignored."""
    if given is not None and not has_conversation(forms):
        raise ValueError(
            f"{where}: chat_template_kwargs is for conversations, and no prompt is one; pass the prompts as lists of "
            '{"role": ..., "content": ...} messages, or drop chat_template_kwargs.'
        )
    if given is not None and not isinstance(given, Mapping):
        raise ValueError(
            f"{where}: chat_template_kwargs must be a dict (e.g. {{'enable_thinking': False}}), got "
            f"{type(given).__name__} {short(given)}."
        )
    kwargs: dict[str, Any] = {"add_generation_prompt": True, **(given or {})}
    for reserved in ("tokenize", "return_dict", "return_tensors", "padding", "truncation"):
        if reserved in kwargs:
            raise ValueError(f"{where}: chat_template_kwargs must not set {reserved!r}; genguard encodes the prompt.")
    return kwargs


@dataclass(frozen=True)
class Encoded:
    """Each prompt's text (what the trace's `prompt` holds), token ids, conversation (or None), and whether it was
    given as ids; `settings`: what the trace's settings gain (the chat template's arguments, with a conversation)."""

    texts: list[str]
    ids: list[tuple[int, ...]]
    messages: list[tuple[dict[str, Any], ...] | None]
    from_ids: list[bool]
    settings: dict[str, JSONScalar]


def encode(
    tokenizer: PreTrainedTokenizerBase, forms: Sequence[Form], kwargs: Mapping[str, Any], *, where: str
) -> Encoded:
    """Each prompt's ids: text as the tokenizer encodes it, ids as given, a conversation as
    ``apply_chat_template(tokenize=True)`` encodes it."""
    texts: list[str] = []
    ids: list[tuple[int, ...]] = []
    messages: list[tuple[dict[str, Any], ...] | None] = []
    for index, form in enumerate(forms):
        if isinstance(form, str):
            texts.append(form)
            ids.append(tuple(int(i) for i in tokenizer(form)["input_ids"]))
            messages.append(None)
        elif form and isinstance(form[0], dict):
            conversation: tuple[dict[str, Any], ...] = form
            text, row = _render(tokenizer, conversation, kwargs, index, where)
            texts.append(text)
            ids.append(row)
            messages.append(conversation)
        else:
            row = tuple(int(i) for i in form)  # type: ignore[arg-type]
            texts.append(tokenizer.decode(list(row)))
            ids.append(row)
            messages.append(None)
    chat = any(m is not None for m in messages)
    settings = {CHAT_SETTING: readable_setting(dict(sorted(kwargs.items())))} if chat else {}
    from_ids = [not isinstance(f, str) and m is None for f, m in zip(forms, messages, strict=True)]
    return Encoded(texts, ids, messages, from_ids, settings)


def _render(
    tokenizer: PreTrainedTokenizerBase,
    conversation: tuple[dict[str, Any], ...],
    kwargs: Mapping[str, Any],
    index: int,
    where: str,
) -> tuple[str, tuple[int, ...]]:
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            f"{where}: prompt {index} is a conversation, but the tokenizer has no chat template; set "
            "tokenizer.chat_template (a Jinja template), or pass the prompt as text or token ids."
        )
    text = tokenizer.apply_chat_template(list(conversation), tokenize=False, **kwargs)
    row = tokenizer.apply_chat_template(list(conversation), tokenize=True, return_dict=False, **kwargs)
    if row and isinstance(row[0], list):  # a batch of one (some versions nest it)
        row = row[0]
    return str(text), tuple(int(i) for i in row)


def recorded_forms(trace: GenerationTrace) -> tuple[list[Any], dict[str, Any] | None]:
    """The prompts as `record()` was given them (text, ids or conversations) and the chat template's arguments (None
    without a conversation): what re-recording a trace passes."""
    forms: list[Any] = [
        list(p.messages) if p.messages is not None else list(p.prompt_ids) if p.from_ids else p.prompt
        for p in trace.prompts
    ]
    return forms, trace.chat_template_kwargs()


def ids_again(tokenizer: PreTrainedTokenizerBase, trace: GenerationTrace) -> list[tuple[int, ...]]:
    """Each prompt of `trace` encoded again by `tokenizer` as record() encoded it (teacher forcing's actual trace:
    a tokenizer that now encodes a prompt otherwise shows as changed prompt ids). A conversation needs the chat
    template; without one its recorded ids are kept (the fingerprints then say the template changed)."""
    forms, kwargs = recorded_forms(trace)
    if all(isinstance(f, str) for f in forms):
        return [tuple(int(i) for i in row) for row in tokenizer(forms)["input_ids"]]
    template = bool(getattr(tokenizer, "chat_template", None))
    return [
        p.prompt_ids
        if p.messages is not None and not template
        else encode(tokenizer, [_form(f)], kwargs or {}, where="verify()").ids[0]
        for p, f in zip(trace.prompts, forms, strict=True)
    ]


def _form(value: Any) -> Form:
    if isinstance(value, str):
        return value
    if value and isinstance(value[0], Mapping):
        return tuple(dict(m) for m in value)
    return tuple(int(i) for i in value)
