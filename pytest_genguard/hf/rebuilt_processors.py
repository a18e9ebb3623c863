"""The logits processors a recording's `generate()` applied, rebuilt from `trace.settings` with transformers'
public classes, in its order (teacher forcing re-applies them along the path: `pytest_genguard.hf.forced_processors`).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pytest_genguard.core.jsontext import JSONScalar
from pytest_genguard.hf._generation import float_setting, int_setting

if TYPE_CHECKING:
    import torch
    from transformers import LogitsProcessorList, PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["build_processors", "model_eos_ids"]

# Defaults `generate()` applies when neither the call nor the model's generation config sets a value (transformers'
# documented global defaults); a trace stores None for those.
_DEFAULTS: dict[str, float | int] = {"temperature": 1.0, "top_k": 50, "top_p": 1.0, "typical_p": 1.0}


def model_eos_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """The EOS ids generate() stops at: the model's generation config, else the tokenizer's."""
    eos = model.generation_config.eos_token_id
    if eos is None:
        eos = tokenizer.eos_token_id
    if eos is None:
        return []
    return [int(e) for e in eos] if isinstance(eos, (list, tuple)) else [int(eos)]


def _repetition_penalty(cls: Any, penalty: float, prompt_mask: torch.Tensor | None) -> Any:
    """As `generate()` builds it: transformers 5 skips each row's left padding (`prompt_ignore_length` as a
    per-row tensor); 4.5x takes only an int there and its `generate()` penalizes the padding too."""
    if prompt_mask is not None and "prompt_ignore_length" in inspect.signature(cls).parameters:
        try:
            return cls(penalty, prompt_ignore_length=(prompt_mask != 0).int().argmax(dim=1))
        except ValueError:
            pass  # 4.5x: no per-row lengths, and generate() passes none
    return cls(penalty)


def build_processors(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    settings: dict[str, JSONScalar] | Any,
    *,
    prompt_length: int,
    prompt_mask: torch.Tensor | None,
    custom: Sequence[Any] = (),
) -> LogitsProcessorList:
    """The logits processors `generate()` applied for `settings`, from transformers' public classes, in its order.

    Settings a trace records (repetition penalty, no-repeat n-gram, min new tokens, and with sampling temperature,
    top-k, top-p, min-p, typical-p) come from `settings`; processors a trace does not record (min_length, forced
    BOS/EOS, suppressed tokens) come from the model's generation config, as they did in `record()`. `custom`
    processors (the user's `logits_processor=`) are merged in as `generate()` merges them: one of a built-in's class
    takes its place, the others follow the built-ins, and the sampling warpers come last.
    """
    import torch
    from transformers import (
        ForcedBOSTokenLogitsProcessor,
        ForcedEOSTokenLogitsProcessor,
        LogitsProcessorList,
        MinLengthLogitsProcessor,
        MinNewTokensLengthLogitsProcessor,
        MinPLogitsWarper,
        NoRepeatNGramLogitsProcessor,
        RepetitionPenaltyLogitsProcessor,
        SuppressTokensAtBeginLogitsProcessor,
        SuppressTokensLogitsProcessor,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
        TypicalLogitsWarper,
    )

    gen = model.generation_config
    eos = torch.tensor(model_eos_ids(model, tokenizer), dtype=torch.long)
    processors = LogitsProcessorList()
    penalty = float_setting(settings.get("repetition_penalty"), 1.0)
    if penalty != 1.0:
        processors.append(_repetition_penalty(RepetitionPenaltyLogitsProcessor, penalty, prompt_mask))
    ngram = int_setting(settings.get("no_repeat_ngram_size"), 0)
    if ngram > 0:
        processors.append(NoRepeatNGramLogitsProcessor(ngram))
    min_length = int_setting(getattr(gen, "min_length", None), 0)
    if min_length > 0 and len(eos):
        processors.append(MinLengthLogitsProcessor(min_length, eos))
    min_new = int_setting(settings.get("min_new_tokens"), 0)
    if min_new > 0 and len(eos):
        processors.append(MinNewTokensLengthLogitsProcessor(prompt_length, min_new, eos))
    if getattr(gen, "forced_bos_token_id", None) is not None:
        processors.append(ForcedBOSTokenLogitsProcessor(gen.forced_bos_token_id))
    if getattr(gen, "forced_eos_token_id", None) is not None:
        max_length = prompt_length + int_setting(settings.get("max_new_tokens"), 0)
        processors.append(ForcedEOSTokenLogitsProcessor(max_length, gen.forced_eos_token_id))
    if getattr(gen, "suppress_tokens", None) is not None:
        processors.append(SuppressTokensLogitsProcessor(gen.suppress_tokens))
    if getattr(gen, "begin_suppress_tokens", None) is not None:
        begin = prompt_length if prompt_length > 1 or gen.forced_bos_token_id is None else prompt_length + 1
        processors.append(SuppressTokensAtBeginLogitsProcessor(gen.begin_suppress_tokens, begin))
    if custom:
        processors = _merged(processors, custom)
    if settings.get("do_sample"):
        temperature = float_setting(settings.get("temperature"), _DEFAULTS["temperature"])
        if temperature != 1.0:
            processors.append(TemperatureLogitsWarper(temperature))
        top_k = int_setting(settings.get("top_k"), int(_DEFAULTS["top_k"]))
        if top_k != 0:
            processors.append(TopKLogitsWarper(top_k=top_k, min_tokens_to_keep=1))
        top_p = float_setting(settings.get("top_p"), _DEFAULTS["top_p"])
        if top_p < 1.0:
            processors.append(TopPLogitsWarper(top_p=top_p, min_tokens_to_keep=1))
        if settings.get("min_p") is not None:
            processors.append(MinPLogitsWarper(min_p=float_setting(settings.get("min_p"), 0.0), min_tokens_to_keep=1))
        typical_p = float_setting(settings.get("typical_p"), _DEFAULTS["typical_p"])
        if typical_p < 1.0:
            processors.append(TypicalLogitsWarper(mass=typical_p, min_tokens_to_keep=1))
    return processors


def _merged(defaults: LogitsProcessorList, custom: Sequence[Any]) -> LogitsProcessorList:
    """transformers' rule for a user's processors (`GenerationMixin._merge_criteria_processor_list`, 4.5x and 5.x)."""
    from transformers import LogitsProcessorList

    merged = LogitsProcessorList()
    for default in defaults:
        merged.append(next((c for c in custom if type(c) is type(default)), default))
    merged.extend(c for c in custom if all(c is not m for m in merged))
    return merged
