"""Is a GGUF file the model the snapshot was recorded on, beyond its logits? llama.cpp reads its tokenizer, special
tokens and hyperparameters from the file's metadata, and conversions get them wrong without moving a logit of a
given id sequence: Llama 3's digit pre-tokenization (llama.cpp #6914), a ``pre=default`` tokenizer (ollama #17698),
"Café" split differently (llama.cpp #23252), a double BOS (llama-cpp-python #1501), a hard-coded RMS epsilon
(llama.cpp #2373), Llama 3.1's rope scaling missing or wrong (llama.cpp #8676). Each check here names what differs;
`genguard check-gguf` calls any of them stale.

The tokenizer is llama.cpp's own (``Llama(vocab_only=True).tokenize``), compared with the transformers tokenizer on
a built-in corpus and on the snapshot's prompt texts; the metadata is read with gguf-py's ``GGUFReader``, once per
state of a file (`gguf_metadata`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_genguard.core.text import quote
from pytest_genguard.core.trace import GenerationTrace

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedTokenizerBase

__all__ = [
    "CORPUS",
    "Mismatch",
    "conformance",
    "metadata_mismatches",
    "template_mismatches",
    "tokenizer_mismatches",
]

CORPUS = (
    "3333+777 = 4110",
    "1234567890 12 345 6789 0.5",
    "  two  spaces,   three,\ttabs\t\tand\n\n\nnewlines  ",
    "Café déjà vu — 123 😊",
    "naïve façade, 東京, Привет, مرحبا",
)
"""Texts where pre-tokenizers differ: digit runs, whitespace runs, accents, dashes, emoji and other scripts (the
special tokens are added from the tokenizer itself, by `corpus()`)."""

_FLOAT_RTOL = 1e-6  # GGUF stores float32: 1e-5 comes back as 9.9999997e-06


@dataclass(frozen=True)
class Mismatch:
    """One way the GGUF differs from the model the snapshot was recorded on."""

    kind: str  # "metadata", "tokenizer", "special tokens", "chat template"
    name: str  # the metadata key, or the text tokenized
    expected: str  # the transformers side (the config, the tokenizer, the snapshot's ids)
    actual: str  # the GGUF side

    def __str__(self) -> str:
        return f"{self.kind}: {self.name}: expected {self.expected}, the GGUF has {self.actual}"


def corpus(tokenizer: PreTrainedTokenizerBase) -> tuple[str, ...]:
    """`CORPUS`, plus one text holding every special token of `tokenizer` between words."""
    specials = [t for t in getattr(tokenizer, "all_special_tokens", []) if t]
    return (*CORPUS, *([" ".join(f"{token}word{i}" for i, token in enumerate(specials))] if specials else []))


def _fields(path: Path) -> dict[str, Any]:
    """The GGUF's scalar and string metadata by key (arrays such as the vocabulary left out)."""
    from pytest_genguard.engines.gguf_metadata import read_metadata

    return dict(read_metadata(path).fields)


def _rope_theta(config: Any) -> float | None:
    parameters = getattr(config, "rope_parameters", None)
    if isinstance(parameters, dict) and parameters.get("rope_theta") is not None:
        return float(parameters["rope_theta"])
    theta = getattr(config, "rope_theta", None)
    return None if theta is None else float(theta)


def _rope_scaling(config: Any) -> dict[str, Any]:
    """The config's rope scaling (transformers 5's ``rope_parameters``, its full-attention entry where it has one per
    layer type; older configs' ``rope_scaling``), with ``rope_type`` "default" when it has none."""
    parameters = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    if isinstance(parameters.get("full_attention"), dict):
        parameters = parameters["full_attention"]
    rope_type = parameters.get("rope_type", parameters.get("type")) or "default"
    return {**parameters, "rope_type": str(rope_type)}


def _llama3_rope_factors(config: Any) -> list[float] | None:
    """The per-frequency divisors llama.cpp applies for Llama 3.1's rope scaling (the ``rope_freqs.weight`` tensor
    convert_hf_to_gguf.py writes; transformers' ``_compute_llama3_parameters``), None unless its rope_type is llama3."""
    scaling = _rope_scaling(config)
    if scaling["rope_type"].lower() != "llama3":
        return None
    base = float(scaling.get("rope_theta") or _rope_theta(config) or 10000.0)
    dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    factor = float(scaling.get("factor", 8.0))
    low, high = float(scaling.get("low_freq_factor", 1.0)), float(scaling.get("high_freq_factor", 4.0))
    old = float(scaling.get("original_max_position_embeddings", 8192))
    out = []
    for i in range(0, dim, 2):
        wavelen = 2 * math.pi * base ** (i / dim)
        if wavelen < old / high:
            out.append(1.0)
        elif wavelen > old / low:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return out


def _rope_scaling_mismatches(arch: str, fields: dict[str, Any], tensors: dict[str, Any], config: Any) -> list[Mismatch]:
    """The GGUF's rope scaling (``{arch}.rope.scaling.*``, llama3's ``rope_freqs.weight``) against the config's:
    llama.cpp applies what the file says, whatever the config said."""
    scaling = _rope_scaling(config)
    rope_type = scaling["rope_type"].lower()
    if rope_type not in ("default", "linear", "yarn", "llama3"):
        return []  # longrope, dynamic, ...: written per architecture, not checked here
    said = f"(config rope_type {scaling['rope_type']!r})"
    # As llama.cpp reads them (llama-model.cpp, llama-context.cpp): the type defaults to linear, the factor to the old
    # key rope.scale_linear, a factor of 0 or none means 1, and type none never scales.
    type_key, factor_key = f"{arch}.rope.scaling.type", f"{arch}.rope.scaling.factor"
    if factor_key not in fields and f"{arch}.rope.scale_linear" in fields:
        factor_key = f"{arch}.rope.scale_linear"
    actual_type = str(fields.get(type_key, "linear"))
    raw = float(fields.get(factor_key) or 0.0)
    actual_factor = 1.0 if raw == 0.0 else raw
    shown_factor = repr(fields[factor_key]) if factor_key in fields else "no such key (llama.cpp: 1, no scaling)"
    out = []
    if rope_type in ("default", "llama3"):
        if actual_type not in ("none", "linear"):
            out.append(Mismatch("metadata", type_key, f"'none' {said}", repr(actual_type)))
        elif actual_type == "linear" and not _same(1.0, actual_factor):
            out.append(Mismatch("metadata", factor_key, f"1, no scaling {said}", f"{shown_factor}, linear"))
    else:
        if actual_type != rope_type:
            shown = repr(actual_type) if type_key in fields else "no such key (llama.cpp's default: 'linear')"
            out.append(Mismatch("metadata", type_key, f"{rope_type!r} {said}", shown))
        factor = float(scaling.get("factor") or 1.0)
        if not _same(factor, actual_factor):
            out.append(Mismatch("metadata", factor_key, f"{factor!r} {said}", shown_factor))
    key = f"{arch}.rope.scaling.original_context_length"
    original = scaling.get("original_max_position_embeddings") if rope_type == "yarn" else None
    if original is not None and (key not in fields or not _same(int(original), fields[key])):
        out.append(Mismatch("metadata", key, f"{original!r} {said}", repr(fields.get(key, "no such key"))))
    expected = _llama3_rope_factors(config)
    found = tensors.get("rope_freqs.weight")
    if expected is None and found is not None:
        out.append(Mismatch("metadata", "rope_freqs.weight", f"no rope factors {said}", f"{len(found)} factors"))
    elif expected is not None:
        if found is None:
            out.append(Mismatch("metadata", "rope_freqs.weight", f"{len(expected)} llama3 factors {said}", "none"))
        elif len(found) != len(expected) or not all(
            math.isclose(float(a), b, rel_tol=_FLOAT_RTOL * 10) for a, b in zip(found, expected, strict=False)
        ):
            out.append(
                Mismatch(
                    "metadata",
                    "rope_freqs.weight",
                    f"llama3 factors {[round(x, 4) for x in expected[-3:]]} (last 3) {said}",
                    f"{[round(float(x), 4) for x in list(found)[-3:]]}",
                )
            )
    return out


def _same(expected: Any, actual: Any) -> bool:
    if isinstance(expected, float) or isinstance(actual, float):
        return math.isclose(float(expected), float(actual), rel_tol=_FLOAT_RTOL)
    return bool(expected == actual)


def metadata_mismatches(path: Path, config: PretrainedConfig) -> list[Mismatch]:
    """The GGUF's hyperparameters that llama.cpp runs with, against the model's config: norm epsilon, rope base and
    scaling (type, factor, original context length; llama3's per-frequency factors), context length and the shapes.
    A key the GGUF lacks is a mismatch (llama.cpp then uses a default of its own)."""
    from pytest_genguard.engines.gguf_metadata import ROPE_FREQS, read_metadata

    metadata = read_metadata(path)
    fields = dict(metadata.fields)
    tensors = {} if metadata.rope_freqs is None else {ROPE_FREQS: metadata.rope_freqs}
    arch = str(fields.get("general.architecture", "llama"))
    wanted = {
        f"{arch}.attention.layer_norm_rms_epsilon": getattr(config, "rms_norm_eps", None),
        f"{arch}.rope.freq_base": _rope_theta(config),
        f"{arch}.context_length": getattr(config, "max_position_embeddings", None),
        f"{arch}.block_count": getattr(config, "num_hidden_layers", None),
        f"{arch}.embedding_length": getattr(config, "hidden_size", None),
        f"{arch}.feed_forward_length": getattr(config, "intermediate_size", None),
        f"{arch}.attention.head_count": getattr(config, "num_attention_heads", None),
        f"{arch}.attention.head_count_kv": getattr(config, "num_key_value_heads", None),
    }
    out = []
    for key, expected in wanted.items():
        if expected is None:
            continue
        if key not in fields:
            out.append(Mismatch("metadata", key, f"{expected!r} (config)", "no such key (llama.cpp's default)"))
        elif not _same(expected, fields[key]):
            out.append(Mismatch("metadata", key, f"{expected!r} (config)", repr(fields[key])))
    return out + _rope_scaling_mismatches(arch, fields, tensors, config)


def _ids(ids: Sequence[int], limit: int = 12) -> str:
    shown = ", ".join(map(str, ids[:limit]))
    return f"[{shown}{', ...' if len(ids) > limit else ''}] ({len(ids)} tokens)"


def _first_difference(a: Sequence[int], b: Sequence[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def _token_mismatch(kind: str, text: str, expected: Sequence[int], actual: Sequence[int], where: str) -> Mismatch:
    at = _first_difference(expected, actual)
    return Mismatch(
        kind,
        f"{quote(text, 60)} ({where})",
        f"{_ids(expected)}, from token {at}: {_ids(expected[at:], 6)}",
        f"{_ids(actual)}, from token {at}: {_ids(actual[at:], 6)}",
    )


def tokenizer_mismatches(
    path: Path, tokenizer: PreTrainedTokenizerBase, traces: Iterable[GenerationTrace] = ()
) -> list[Mismatch]:
    """llama.cpp's tokenization against transformers': the built-in corpus (special tokens parsed, none added), BOS
    and EOS (the ids, and whether tokenizing adds them), and each snapshot prompt's text against its recorded ids."""
    import llama_cpp

    llm = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
    try:

        def gguf_ids(text: str, add_special: bool) -> list[int]:
            return [int(i) for i in llm.tokenize(text.encode("utf-8"), add_bos=add_special, special=True)]

        out = []
        for text in corpus(tokenizer):
            expected = [int(i) for i in tokenizer(text, add_special_tokens=False)["input_ids"]]
            actual = gguf_ids(text, add_special=False)
            if expected != actual:
                out.append(_token_mismatch("tokenizer", text, expected, actual, "built-in corpus"))
        for name, expected_id, actual_id in (
            ("BOS id", tokenizer.bos_token_id, llm.token_bos()),
            ("EOS id", tokenizer.eos_token_id, llm.token_eos()),
        ):
            if expected_id is not None and int(expected_id) != int(actual_id):
                out.append(Mismatch("special tokens", name, f"{expected_id} (tokenizer)", str(actual_id)))
        sample = "Hello world"
        added = [int(i) for i in tokenizer(sample)["input_ids"]]
        if added != gguf_ids(sample, add_special=True):
            out.append(
                Mismatch(
                    "special tokens",
                    f"tokens added to {sample!r} (BOS/EOS handling)",
                    f"{_ids(added)} (tokenizer)",
                    _ids(gguf_ids(sample, add_special=True)),
                )
            )
        for trace in traces:
            for i, prompt in enumerate(trace.prompts):
                if prompt.from_ids:
                    continue  # given as ids: nothing was tokenized
                # A conversation's text is the rendered template (its special tokens written out, none added).
                actual = gguf_ids(prompt.prompt, add_special=prompt.messages is None)
                if list(prompt.prompt_ids) != actual:
                    out.append(
                        _token_mismatch("tokenizer", prompt.prompt, prompt.prompt_ids, actual, f"snapshot prompt {i}")
                    )
        return out
    finally:
        llm.close()


def _first_char_difference(a: str, b: str) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def template_mismatches(
    path: Path, tokenizer: PreTrainedTokenizerBase, traces: Iterable[GenerationTrace] = ()
) -> list[Mismatch]:
    """The GGUF's embedded chat template against the tokenizer's, and each snapshot conversation rendered with the
    GGUF's template as llama-cpp-python renders it (``Jinja2ChatFormatter``, its chat completions' formatter for a
    GGUF's own template) against the text the snapshot recorded."""
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    embedded = _fields(path).get("tokenizer.chat_template")
    expected = getattr(tokenizer, "chat_template", None)
    if not isinstance(expected, str):
        return []  # no template, or several by name: the conversations below would not be rendered by one
    if not isinstance(embedded, str):
        return [Mismatch("chat template", "tokenizer.chat_template", f"a template ({len(expected)} chars)", "none")]
    out = []
    if embedded != expected:
        at = _first_char_difference(expected, embedded)
        out.append(
            Mismatch(
                "chat template",
                "tokenizer.chat_template",
                f"the tokenizer's ({len(expected)} chars; from char {at}: {quote(expected[at:], 40)})",
                f"another ({len(embedded)} chars; from char {at}: {quote(embedded[at:], 40)})",
            )
        )
    formatter = Jinja2ChatFormatter(
        template=embedded, eos_token=str(tokenizer.eos_token or ""), bos_token=str(tokenizer.bos_token or "")
    )
    for trace in traces:
        for i, prompt in enumerate(trace.prompts):
            if prompt.messages is None:
                continue
            messages: list[Any] = [dict(m) for m in prompt.messages]  # llama-cpp-python's TypedDicts, as JSON
            rendered = formatter(messages=messages).prompt
            if rendered != prompt.prompt:
                at = _first_char_difference(prompt.prompt, rendered)
                out.append(
                    Mismatch(
                        "chat template",
                        f"snapshot conversation {i} rendered with the GGUF's template",
                        f"{quote(prompt.prompt[at:], 40)} from char {at}",
                        quote(rendered[at:], 40),
                    )
                )
    return out


def conformance(
    path: Path, config: PretrainedConfig, tokenizer: PreTrainedTokenizerBase, traces: Iterable[GenerationTrace] = ()
) -> list[Mismatch]:
    """Every mismatch between the GGUF at `path` and the model (config, tokenizer, chat template, the snapshots'
    prompts)."""
    traces = list(traces)
    return (
        metadata_mismatches(path, config)
        + tokenizer_mismatches(path, tokenizer, traces)
        + template_mismatches(path, tokenizer, traces)
    )
