"""The decoding settings a trace stores, read off the call's `GenerationConfig`: the known ones (`SETTING_KEYS`,
always written, normalized across transformers versions) and every other field that differs from a default
`GenerationConfig` (written only when set, as readable text), so that any setting changed after recording makes a
snapshot stale instead of a regression of the model. Imports nothing from torch or transformers.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pytest_genguard.core.jsontext import JSONScalar

if TYPE_CHECKING:
    from transformers import GenerationConfig

__all__ = [
    "NOT_SETTINGS",
    "SETTING_KEYS",
    "float_setting",
    "int_setting",
    "mode",
    "other_settings",
    "readable_setting",
    "requested_settings",
    "trace_settings",
]

# Generation settings that change what is generated; stored in every trace so a changed test is told from a change
# of the model.
SETTING_KEYS: tuple[str, ...] = (
    "max_new_tokens",
    "min_new_tokens",
    "do_sample",
    "num_beams",
    "temperature",
    "top_k",
    "top_p",
    "typical_p",
    "min_p",
    "repetition_penalty",
    "no_repeat_ngram_size",
    "length_penalty",
    "early_stopping",
    "use_cache",
)


# GenerationConfig fields that are not decoding settings: what generate() returns, ids the model and tokenizer
# fingerprints already identify (EOS is stored as "eos_token_id"), bookkeeping, and max_length (record()'s
# max_new_tokens decides). Every other field that differs from a default GenerationConfig is a decoding setting and
# is stored (`_other_settings`): a list of what is *not* a setting, so a field a transformers release adds counts.
NOT_SETTINGS = frozenset(
    {
        "output_attentions",
        "output_hidden_states",
        "output_scores",
        "output_logits",
        "return_dict_in_generate",
        "pad_token_id",
        "bos_token_id",
        "eos_token_id",
        "decoder_start_token_id",
        "max_length",
        "num_return_sequences",
        "transformers_version",
        "generation_kwargs",
    }
)


# Values that leave decoding as it is, and settings that act in one mode only: stored as None, so a trace reads the
# same whether a transformers version spells "unset" as None (5.x) or as the neutral default (4.5x fills them in).
_NEUTRAL: dict[str, JSONScalar] = {
    "do_sample": False,
    "num_beams": 1,
    "temperature": 1.0,
    "top_p": 1.0,
    "typical_p": 1.0,
    "min_p": 0.0,
    "repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "min_new_tokens": 0,
    "length_penalty": 1.0,
    "early_stopping": False,
    "use_cache": True,
}
_SAMPLING_ONLY = frozenset({"temperature", "top_k", "top_p", "typical_p", "min_p"})
_BEAM_ONLY = frozenset({"length_penalty", "early_stopping"})


def trace_settings(config: GenerationConfig) -> dict[str, JSONScalar]:
    """The decoding settings a trace stores for `config`: `SETTING_KEYS` (normalized across transformers versions)
    and, when set, every other decoding field (see `NOT_SETTINGS`)."""
    return {**_other_settings(config), **_known_settings(config)}


def _known_settings(config: GenerationConfig) -> dict[str, JSONScalar]:
    """The settings of `SETTING_KEYS`, normalized across transformers versions."""
    current = mode(config)
    settings: dict[str, JSONScalar] = {}
    for key in SETTING_KEYS:
        value = getattr(config, key, None)
        if not (isinstance(value, (bool, int, float, str)) or value is None):
            continue
        inactive = (key in _SAMPLING_ONLY and not getattr(config, "do_sample", False)) or (
            key in _BEAM_ONLY and current != "beam"
        )
        neutral = key in _NEUTRAL and value == _NEUTRAL[key] and type(value) is type(_NEUTRAL[key])
        settings[key] = None if inactive or neutral else value
    return settings


def _other_settings(config: GenerationConfig) -> dict[str, JSONScalar]:
    """The decoding settings outside `SETTING_KEYS` that differ from a default `GenerationConfig`
    (``to_diff_dict()``: bad_words_ids, suppress_tokens, sequence_bias, stop_strings, ...), readable in the trace.
    Only what was set is stored: a trace recorded without them reads as before. A flag set to False or an empty
    list is off, as unset is (5.x's defaults are None where 4.57's were False), so it is not stored either."""
    out: dict[str, JSONScalar] = {}
    for key, value in sorted(config.to_diff_dict().items()):
        if key in SETTING_KEYS or key in NOT_SETTINGS or key.startswith("_") or value is None:
            continue
        if value is False or (isinstance(value, (str, list, tuple, dict)) and not value):
            continue
        out[key] = readable_setting(value)
    return out


# Keys every trace's settings may hold besides `SETTING_KEYS` (written by record() itself).
_OWN_KEYS = frozenset(
    {"mode", "seed", "record_top_k", "eos_token_id", "logits_processor", "chat_template_kwargs", "assistant_model"}
)


def other_settings(settings: Mapping[str, JSONScalar]) -> dict[str, Any]:
    """The settings of a stored trace outside `SETTING_KEYS` (see `_other_settings`), as `generate()` takes them
    (JSON text parsed back): what teacher forcing does not re-apply, so verify() re-generates with them."""
    out: dict[str, Any] = {}
    for key, value in settings.items():
        if key in SETTING_KEYS or key in _OWN_KEYS:
            continue
        parsed: Any = value
        if isinstance(value, str) and value[:1] in "[{":
            try:
                parsed = json.loads(value)
            except ValueError:
                parsed = value
        out[key] = parsed
    return out


def readable_setting(value: Any) -> JSONScalar:
    """A setting as a trace stores it: a scalar as it is, anything else as compact JSON text (tuples as lists, a
    mapping with non-string keys, like sequence_bias, as [key, value] pairs: the form generate() also accepts)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return json.dumps(_plain(value), sort_keys=True, default=str)


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value):
            return {k: _plain(v) for k, v in value.items()}
        return [[_plain(k), _plain(v)] for k, v in value.items()]
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def mode(config: GenerationConfig) -> str:
    """greedy, sample or beam: how `config` decodes."""
    if (getattr(config, "num_beams", 1) or 1) > 1:
        return "beam"
    return "sample" if getattr(config, "do_sample", False) else "greedy"


def int_setting(value: JSONScalar, default: int) -> int:
    """A stored setting as an int (`default` when unset or not a number)."""
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def float_setting(value: JSONScalar, default: float) -> float:
    """A stored setting as a float (`default` when unset or not a number)."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def requested_settings(
    base: GenerationConfig, generate_kwargs: Mapping[str, Any]
) -> tuple[dict[str, JSONScalar], dict[str, JSONScalar]]:
    """What record() would store for `generate_kwargs` on top of `base` (the model's generation config, or the
    `generation_config=` given), read off one generation config built once: the settings outside `SETTING_KEYS`,
    and the `SETTING_KEYS` values of the ones `generate_kwargs` set, normalized as record() stores them
    (``do_sample=False`` is stored as unset). What a verify() call asks for, to tell a changed test argument from a
    changed model."""
    config = copy.deepcopy(generate_kwargs.get("generation_config") or base)
    config.update(**{k: v for k, v in generate_kwargs.items() if k != "generation_config"})
    known = _known_settings(config)
    return _other_settings(config), {k: known[k] for k in generate_kwargs if k in known}
