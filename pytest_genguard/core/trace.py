"""The trace model and its JSON form: the torch-free data core.

A `GenerationTrace` is what `record()` captured: per prompt the generated token path with, at every step, the chosen
token's raw log-probability, its processed score, the raw top-k and the top-1/top-2 margin; plus the metadata that
says what produced it (decoding settings, model and tokenizer fingerprints, environment).

JSON form (schema 1), chosen for review in a git diff:
- stable key order, metadata first, one step per line so a diff names the step that changed;
- floats are written as the shortest decimal that round-trips the float32 value (at most 9 significant digits), so
  float32 values survive a round trip bit for bit; each step's "margin" (top-1 minus top-2, derived, never read back)
  is written with 4 significant digits for the reviewer; NaN and infinities are written as the strings "nan", "inf",
  "-inf";
- token strings are the token's bytes decoded as UTF-8 with ``surrogateescape``: a byte-level token that is not valid
  UTF-8 on its own keeps its bytes as lone surrogates, written as ``\\udcXX`` escapes (see `Step.token_bytes`);
- ``"token_texts"`` (optional, last) maps the top-k ids that no step chose to their token strings, so a reader (the
  HTML report) can name every alternative; derived from the tokenizer, never compared. Files without it load as
  before, and readers that do not know it ignore it;
- optional, written only when set (so other traces read byte for byte as before): a prompt's ``"messages"`` (the
  conversation, one message a line) and ``"from_ids": true``; the tokenizer's ``"chat_template"``; the model's
  ``"adapters"`` block (PEFT adapters: see `pytest_genguard.core.adapters`), ``"name_or_path"`` and ``"revision"``
  (where it came from); ``"calibration"`` after the environment (what genguard's reference conversions of the model
  cost: `pytest_genguard.hf.fidelity.calibrate`);
- a sampled step's support, last on its line: ``"kept"`` (how many tokens the processors kept), ``"kept_range"``
  (only where near-threshold tokens make other counts possible within float error) and ``"probs"`` (the processed
  probability of each top-k token), for judging a server's sampler (`pytest_genguard.core.sampling`). Greedy and beam
  steps, and every trace recorded before them, keep their bytes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_genguard.core.errors import TraceFormatError
from pytest_genguard.core.jsontext import (
    SPECIAL_FLOATS,
    JSONScalar,
    float32,
    floats_text,
    format_float,
    ints_text,
    json_text,
    mapping_text,
    string_text,
)
from pytest_genguard.core.trace_parts import (
    FINISH_REASONS as FINISH_REASONS,
    FinishReason as FinishReason,
    ModelFingerprint as ModelFingerprint,
    PromptTrace as PromptTrace,
    Step as Step,
    Support as Support,
    TokenizerFingerprint as TokenizerFingerprint,
)

SCHEMA_VERSION = 1

CHAT_SETTING = "chat_template_kwargs"
"""The settings key of a trace with conversations: the chat template's keyword arguments, as JSON text."""


@dataclass(frozen=True)
class GenerationTrace:
    """Everything `record()` captured for one batch of prompts."""

    prompts: tuple[PromptTrace, ...]
    settings: Mapping[str, JSONScalar] = field(default_factory=dict)
    model: ModelFingerprint | None = None
    tokenizer: TokenizerFingerprint | None = None
    environment: Mapping[str, JSONScalar] = field(default_factory=dict)
    schema: int = SCHEMA_VERSION
    token_texts: Mapping[int, str] = field(default_factory=dict, compare=False)
    """Token strings of top-k ids that no step chose (the chosen ones are in the steps); for display only."""
    calibration: Mapping[str, JSONScalar] = field(default_factory=dict, compare=False)
    """What genguard's reference conversions of the recording model cost along these paths (``"int8.kld_mean"``:
    `pytest_genguard.hf.fidelity.calibrate`), the scale of the fidelity presets; never compared."""

    def token_text(self, token_id: int) -> str | None:
        """The token string of `token_id` as far as this trace knows it (a chosen token or a stored alternative)."""
        if token_id in self.token_texts:
            return self.token_texts[token_id]
        return next((s.token for p in self.prompts for s in p.steps if s.token_id == token_id), None)

    def chat_template_kwargs(self) -> dict[str, Any] | None:
        """The chat template's keyword arguments the conversations were rendered with (None: no conversation)."""
        raw = self.settings.get(CHAT_SETTING)
        value = json.loads(raw) if isinstance(raw, str) else None
        return value if isinstance(value, dict) else None

    def __iter__(self) -> Iterator[PromptTrace]:
        return iter(self.prompts)

    def __len__(self) -> int:
        return len(self.prompts)

    def __getitem__(self, index: int) -> PromptTrace:
        return self.prompts[index]

    @property
    def dtype(self) -> str | None:
        """The model dtype the trace was recorded in, the key to default tolerances."""
        if self.model is not None:
            return self.model.dtype
        value = self.environment.get("dtype")
        return str(value) if value is not None else None

    @property
    def min_margin(self) -> float:
        return min((p.min_margin for p in self.prompts), default=math.inf)

    def to_json(self) -> str:
        """Serialize to the diff-friendly schema-1 JSON text (ends with a newline)."""
        return dumps(self)

    @classmethod
    def from_json(cls, text: str, *, source: str = "<string>") -> GenerationTrace:
        """Parse schema-1 JSON text; `source` names the file in error messages."""
        return loads(text, source=source)


# ---------------------------------------------------------------------------------------------------- encoding


def _margin(value: float) -> str:
    """The derived top-1/top-2 margin, for the reader's eye only (never read back): 4 significant digits."""
    return format_float(value) if not math.isfinite(value) else f"{value:.4g}"


def _step(step: Step) -> str:
    best = "" if step.best_score is None else f'"best_score": {format_float(step.best_score)}, '
    lse = "" if step.lse is None else f'"lse": {format_float(step.lse)}, '
    support = _support(step.support)
    return (
        f'{{"id": {step.token_id}, "token": {string_text(step.token)}, "logprob": {format_float(step.logprob)}, '
        f'"score": {format_float(step.score)}, {best}{lse}"margin": {_margin(step.margin)}, '
        f'"top_ids": {ints_text(step.top_ids)}, "top_logprobs": {floats_text(step.top_logprobs)}{support}}}'
    )


def _support(support: Support | None) -> str:
    """A sampled step's support, after its top-k (nothing for other steps, so their lines keep their bytes)."""
    if support is None:
        return ""
    band = (support.low, support.high)
    near = "" if band == (support.kept, support.kept) else f', "kept_range": {ints_text(band)}'
    return f', "kept": {support.kept}{near}, "probs": {floats_text(support.probs)}'


def _message(message: Mapping[str, Any]) -> str:
    """One chat message on one line, keys sorted, UTF-8 kept."""
    return json_text(message)


def _prompt(p: PromptTrace) -> str:
    steps = ",\n".join(f"        {_step(s)}" for s in p.steps)
    steps_text = "[\n" + steps + "\n      ]" if p.steps else "[]"
    messages = ""
    if p.messages is not None:
        lines = ",\n".join(f"        {_message(m)}" for m in p.messages)
        messages = f'      "messages": [\n{lines}\n      ],\n'
    from_ids = '      "from_ids": true,\n' if p.from_ids else ""
    return (
        "    {\n"
        f'      "prompt": {string_text(p.prompt)},\n'
        f"{messages}"
        f"{from_ids}"
        f'      "prompt_ids": {ints_text(p.prompt_ids)},\n'
        f'      "finish_reason": {string_text(p.finish_reason)},\n'
        f'      "text": {string_text(p.text)},\n'
        f'      "steps": {steps_text}\n'
        "    }"
    )


def dumps(trace: GenerationTrace) -> str:
    """The schema-1 JSON text of `trace` (see the module docstring for the format)."""
    model = _model(trace.model) if trace.model else "null"
    tokenizer = _tokenizer(trace.tokenizer) if trace.tokenizer else "null"
    prompts = "[\n" + ",\n".join(_prompt(p) for p in trace.prompts) + "\n  ]" if trace.prompts else "[]"
    texts = f',\n  "token_texts": {_texts(trace.token_texts)}' if trace.token_texts else ""
    calibration = f'  "calibration": {mapping_text(trace.calibration, "  ")},\n' if trace.calibration else ""
    return (
        "{\n"
        f'  "schema": {SCHEMA_VERSION},\n'
        f'  "settings": {mapping_text(trace.settings, "  ")},\n'
        f'  "model": {model},\n'
        f'  "tokenizer": {tokenizer},\n'
        f'  "environment": {mapping_text(trace.environment, "  ")},\n'
        f"{calibration}"
        f'  "prompts": {prompts}{texts}\n'
        "}\n"
    )


def _texts(texts: Mapping[int, str], width: int = 114) -> str:
    """The id -> token table, sorted by id, several entries per line (derived data: compact beats one per line)."""
    entries = [f'"{token_id}": {string_text(text)}' for token_id, text in sorted(texts.items())]
    lines: list[str] = []
    for entry in entries:
        if lines and len(lines[-1]) + len(entry) + 2 <= width:
            lines[-1] += ", " + entry
        else:
            lines.append(entry)
    return "{\n" + ",\n".join(f"    {line}" for line in lines) + "\n  }"


def vars_of(obj: ModelFingerprint | TokenizerFingerprint) -> dict[str, JSONScalar]:
    """The scalar fields to write; an unset recipe is left out, so traces of plain models do not carry it (the
    model's `config` mapping is written by `dumps` on its own)."""
    fields: dict[str, Any] = dict(obj.__dict__)
    fields.pop("config", None)
    fields.pop("adapters", None)  # a mapping, written by `_model` on its own
    fields.pop("parts", None)  # a mapping, written by `_tokenizer` on its own
    # Unset: left out, so older traces (and traces of models whose origin is unknown) keep their bytes.
    for optional in ("recipe", "chat_template", "adapters", "name_or_path", "revision"):
        if fields.get(optional, "") is None:
            del fields[optional]
    if fields.get("hash_version") == 1:  # the first version: left out, as traces before the field wrote it
        del fields["hash_version"]
    return fields


def _model(model: ModelFingerprint) -> str:
    text = mapping_text(vars_of(model), "  ")
    return _with_mapping(_with_mapping(text, "adapters", model.adapters), "config", model.config)


def _tokenizer(tokenizer: TokenizerFingerprint) -> str:
    return _with_mapping(mapping_text(vars_of(tokenizer), "  "), "parts", tokenizer.parts)


def _with_mapping(text: str, key: str, mapping: Mapping[str, JSONScalar] | None) -> str:
    """A fingerprint's scalar fields with one nested mapping written last (nothing when it is None)."""
    if mapping is None:
        return text
    return text[: -len("\n  }")] + f',\n    "{key}": {mapping_text(mapping, "    ")}\n  }}'


# ---------------------------------------------------------------------------------------------------- decoding


class _Reader:
    """Typed access to a parsed document that turns every shape error into a `TraceFormatError` naming the path."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, problem: str) -> TraceFormatError:
        return TraceFormatError(
            f"{self.source}: {where}: {problem}. The trace file is corrupt or was edited by hand; "
            "re-record it (for snapshots: pytest --snapshot-update)."
        )

    def obj(self, value: Any, where: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(where, f"expected an object, found {type(value).__name__}")
        return value

    def key(self, obj: dict[str, Any], key: str, where: str) -> Any:
        if key not in obj:
            raise self.fail(where, f"missing key {key!r}")
        return obj[key]

    def int_(self, value: Any, where: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(where, f"expected an integer, found {value!r}")
        return value

    def str_(self, value: Any, where: str) -> str:
        if not isinstance(value, str):
            raise self.fail(where, f"expected a string, found {value!r}")
        return value

    def float_(self, value: Any, where: str) -> float:
        """A stored float32 value (the text is its shortest decimal, so snap it back to float32)."""
        if isinstance(value, str) and value in SPECIAL_FLOATS:
            return SPECIAL_FLOATS[value]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(where, f"expected a number, found {value!r}")
        return float32(float(value))

    def list_(self, value: Any, where: str) -> list[Any]:
        if not isinstance(value, list):
            raise self.fail(where, f"expected a list, found {type(value).__name__}")
        return value

    def scalars(self, value: Any, where: str) -> dict[str, JSONScalar]:
        out: dict[str, JSONScalar] = {}
        for k, v in self.obj(value, where).items():
            if v is not None and not isinstance(v, (str, int, float, bool)):
                raise self.fail(f"{where}.{k}", f"expected a scalar, found {type(v).__name__}")
            out[k] = SPECIAL_FLOATS.get(v, v) if isinstance(v, str) and k in _FLOAT_SETTINGS else v
        return out


# Settings whose values are floats and may be written as "nan"/"inf" strings.
_FLOAT_SETTINGS = frozenset({"temperature", "top_p", "repetition_penalty", "length_penalty", "typical_p"})


def _read_step(r: _Reader, raw: Any, where: str) -> Step:
    obj = r.obj(raw, where)
    top_ids = tuple(r.int_(v, f"{where}.top_ids") for v in r.list_(r.key(obj, "top_ids", where), where))
    top_lps = tuple(r.float_(v, f"{where}.top_logprobs") for v in r.list_(r.key(obj, "top_logprobs", where), where))
    if len(top_ids) != len(top_lps):
        raise r.fail(where, f"top_ids has {len(top_ids)} entries but top_logprobs has {len(top_lps)}")
    return Step(
        token_id=r.int_(r.key(obj, "id", where), f"{where}.id"),
        token=r.str_(r.key(obj, "token", where), f"{where}.token"),
        logprob=r.float_(r.key(obj, "logprob", where), f"{where}.logprob"),
        score=r.float_(r.key(obj, "score", where), f"{where}.score"),
        top_ids=top_ids,
        top_logprobs=top_lps,
        best_score=None if obj.get("best_score") is None else r.float_(obj["best_score"], f"{where}.best_score"),
        lse=None if obj.get("lse") is None else r.float_(obj["lse"], f"{where}.lse"),
        support=None if obj.get("kept") is None else _read_support(r, obj, len(top_ids), where),
    )


def _read_support(r: _Reader, obj: dict[str, Any], k: int, where: str) -> Support:
    kept = r.int_(obj["kept"], f"{where}.kept")
    probs = tuple(r.float_(v, f"{where}.probs") for v in r.list_(r.key(obj, "probs", where), f"{where}.probs"))
    if len(probs) != k:
        raise r.fail(where, f"probs has {len(probs)} entries but top_ids has {k}")
    band = [r.int_(v, f"{where}.kept_range") for v in r.list_(obj.get("kept_range", [kept, kept]), where)]
    if len(band) != 2 or not 0 <= band[0] <= kept <= band[1]:
        raise r.fail(f"{where}.kept_range", f"expected [low, high] around kept {kept}, found {band!r}")
    low, high = band
    return Support(kept, probs, low, high)


def _read_prompt(r: _Reader, raw: Any, where: str) -> PromptTrace:
    obj = r.obj(raw, where)
    finish = r.str_(r.key(obj, "finish_reason", where), f"{where}.finish_reason")
    if finish not in FINISH_REASONS:
        raise r.fail(f"{where}.finish_reason", f"{finish!r} is not one of {', '.join(FINISH_REASONS)}")
    steps = r.list_(r.key(obj, "steps", where), f"{where}.steps")
    return PromptTrace(
        prompt=r.str_(r.key(obj, "prompt", where), f"{where}.prompt"),
        prompt_ids=tuple(r.int_(v, f"{where}.prompt_ids") for v in r.list_(r.key(obj, "prompt_ids", where), where)),
        steps=tuple(_read_step(r, s, f"{where}.steps[{i}]") for i, s in enumerate(steps)),
        finish_reason=finish,
        text=r.str_(obj.get("text", ""), f"{where}.text"),
        messages=None if obj.get("messages") is None else _read_messages(r, obj["messages"], f"{where}.messages"),
        from_ids=obj.get("from_ids") is True,
    )


def _read_messages(r: _Reader, raw: Any, where: str) -> tuple[Mapping[str, Any], ...]:
    messages = tuple(r.obj(m, f"{where}[{i}]") for i, m in enumerate(r.list_(raw, where)))
    for i, m in enumerate(messages):
        r.str_(r.key(m, "role", f"{where}[{i}]"), f"{where}[{i}].role")
    return messages


def loads(text: str, *, source: str = "<string>") -> GenerationTrace:
    """Parse schema-1 trace JSON; every problem raises `TraceFormatError` naming `source` and the fix."""
    r = _Reader(source)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceFormatError(
            f"{source}: not valid JSON ({exc.msg}: line {exc.lineno}, column {exc.colno}); the file is truncated "
            "or corrupt: restore it from version control or re-record it (pytest --snapshot-update)."
        ) from None
    except (ValueError, RecursionError) as exc:  # e.g. an integer beyond int_max_str_digits, absurd nesting
        raise TraceFormatError(
            f"{source}: not a readable trace ({type(exc).__name__}: {exc}); the file is corrupt: restore it from "
            "version control or re-record it (pytest --snapshot-update)."
        ) from None
    obj = r.obj(doc, "document")
    schema = obj.get("schema")
    if type(schema) is not int or schema != SCHEMA_VERSION:  # `true` and `1.0` equal 1 in Python
        raise TraceFormatError(
            f"{source}: trace schema {schema!r} is not supported by this pytest-genguard (it reads schema "
            f"{SCHEMA_VERSION}). Re-record it with this version (pytest --snapshot-update), or use the "
            "pytest-genguard version that wrote it."
        )
    model_raw = obj.get("model")
    tok_raw = obj.get("tokenizer")
    model = None
    if model_raw is not None:
        m = r.obj(model_raw, "model")
        model = ModelFingerprint(
            model_type=r.str_(r.key(m, "model_type", "model"), "model.model_type"),
            config_hash=r.str_(r.key(m, "config_hash", "model"), "model.config_hash"),
            weights_hash=r.str_(r.key(m, "weights_hash", "model"), "model.weights_hash"),
            num_parameters=r.int_(r.key(m, "num_parameters", "model"), "model.num_parameters"),
            dtype=r.str_(r.key(m, "dtype", "model"), "model.dtype"),
            recipe=None if m.get("recipe") is None else r.str_(m["recipe"], "model.recipe"),
            config=None if m.get("config") is None else r.scalars(m["config"], "model.config"),
            adapters=None if m.get("adapters") is None else r.scalars(m["adapters"], "model.adapters"),
            name_or_path=None if m.get("name_or_path") is None else r.str_(m["name_or_path"], "model.name_or_path"),
            revision=None if m.get("revision") is None else r.str_(m["revision"], "model.revision"),
        )
    tokenizer = None
    if tok_raw is not None:
        t = r.obj(tok_raw, "tokenizer")
        tokenizer = TokenizerFingerprint(
            name=r.str_(r.key(t, "name", "tokenizer"), "tokenizer.name"),
            vocab_size=r.int_(r.key(t, "vocab_size", "tokenizer"), "tokenizer.vocab_size"),
            hash=r.str_(r.key(t, "hash", "tokenizer"), "tokenizer.hash"),
            chat_template=None
            if t.get("chat_template") is None
            else r.str_(t["chat_template"], "tokenizer.chat_template"),
            parts=None if t.get("parts") is None else r.scalars(t["parts"], "tokenizer.parts"),
            hash_version=1 if t.get("hash_version") is None else r.int_(t["hash_version"], "tokenizer.hash_version"),
        )
    prompts = r.list_(r.key(obj, "prompts", "document"), "prompts")
    return GenerationTrace(
        prompts=tuple(_read_prompt(r, p, f"prompts[{i}]") for i, p in enumerate(prompts)),
        # Every version wrote "settings": without it, a damaged file would read as changed settings (stale), which
        # --genguard-update-stale would overwrite.
        settings=r.scalars(r.key(obj, "settings", "document"), "settings"),
        model=model,
        tokenizer=tokenizer,
        environment=r.scalars(obj.get("environment", {}), "environment"),
        token_texts=_read_texts(r, obj.get("token_texts", {})),
        calibration=r.scalars(obj.get("calibration", {}), "calibration"),
    )


def _read_texts(r: _Reader, raw: Any) -> dict[int, str]:
    out: dict[int, str] = {}
    for key, value in r.obj(raw, "token_texts").items():
        if not (key.isascii() and key.isdigit() and len(key) <= 18):
            raise r.fail(f"token_texts.{key}", "expected a token id (a decimal integer) as the key")
        out[int(key)] = r.str_(value, f"token_texts.{key}")
    return out
