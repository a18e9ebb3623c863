"""The tokenizer hash of version 2 (the backend's own serialization, hashed without a JSON parse: issue 32's cold
fingerprint of a 150k-token vocabulary) sees every change version 1 saw, names the part, and does not make snapshots
recorded with version 1 stale: across versions the parts both define alike decide."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from pytest_genguard.core.compare import compare
from pytest_genguard.core.trace import GenerationTrace
from pytest_genguard.hf.record import record
from pytest_genguard.hf.tiny import tiny_tokenizer
from pytest_genguard.hf.tokenizer_hash import HASH_VERSION, legacy_tokenizer_hash, tokenizer_fingerprint

# The tiny tokenizer's version-1 hash as the committed example snapshots hold it (examples/__snapshots__): training
# identities are still made of it, so a history recorded before version 2 keeps its recipe.
TINY_V1_HASH = "a5487ca8e74f6329bc490752794f9c3347a24479376527cdd45b108c5a066b6e"


@pytest.fixture(scope="module")
def base(gpt2: Any, tokenizer: Any) -> GenerationTrace:
    return record(gpt2, tokenizer, "the quick", max_new_tokens=2)


def _with(base: GenerationTrace, tok: Any) -> GenerationTrace:
    return dataclasses.replace(base, tokenizer=tokenizer_fingerprint(tok))


def _as_version_1(trace: GenerationTrace, tok: Any, *, parts: bool) -> GenerationTrace:
    """The trace as pytest-genguard wrote it before version 2: the legacy hash, and version 1's short hashes of the
    vocabulary and merges (another definition: they must not be compared with version 2's)."""
    fp = trace.tokenizer
    assert fp is not None and fp.parts is not None
    old_parts = {**fp.parts, "vocab_hash": "111111111111", "merges_hash": "222222222222"} if parts else None
    old = dataclasses.replace(fp, hash=legacy_tokenizer_hash(tok), hash_version=1, parts=old_parts)
    return dataclasses.replace(trace, tokenizer=old)


def _fast(backend: Tokenizer) -> Any:
    """`backend` as transformers loads a tokenizer, with the tiny tokenizer's special tokens."""
    tiny = tiny_tokenizer()
    return PreTrainedTokenizerFast(tokenizer_object=backend, **tiny.special_tokens_map)


def _edited(edit: Any) -> Any:
    """The tiny tokenizer with `edit` applied to its serialized model (a dict)."""
    doc = json.loads(tiny_tokenizer().backend_tokenizer.to_str())
    edit(doc["model"])
    return _fast(Tokenizer.from_str(json.dumps(doc)))


def _swap_two_merges(model: dict[str, Any]) -> None:
    merges = model["merges"]
    merges[10], merges[11] = merges[11], merges[10]


def _rename_a_token(model: dict[str, Any]) -> None:
    """Rename a token no merge makes or uses (a byte symbol the corpus never had), keeping its id."""
    vocab = model["vocab"]
    in_merges = {t for pair in model["merges"] for t in (*pair, "".join(pair))}
    unused = next(t for t in sorted(vocab, key=vocab.get) if t not in in_merges and not t.startswith("<"))
    vocab["zzzq"] = vocab.pop(unused)


def test_new_traces_carry_version_2_and_the_file_keeps_it(base: GenerationTrace) -> None:
    assert base.tokenizer is not None and base.tokenizer.hash_version == HASH_VERSION == 2
    back = GenerationTrace.from_json(base.to_json())
    assert back.tokenizer == base.tokenizer
    v1 = dataclasses.replace(base, tokenizer=dataclasses.replace(base.tokenizer, hash_version=1))
    assert '"hash_version"' not in v1.to_json()  # version 1 reads and writes as before the field
    back_v1 = GenerationTrace.from_json(v1.to_json()).tokenizer
    assert back_v1 is not None and back_v1.hash_version == 1


def test_the_legacy_hash_is_version_1_unchanged() -> None:
    assert legacy_tokenizer_hash(tiny_tokenizer()) == TINY_V1_HASH
    assert tokenizer_fingerprint(tiny_tokenizer()).hash != TINY_V1_HASH


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        (_swap_two_merges, "tokenizer changed: merges changed (508 entries)"),
        (_rename_a_token, "tokenizer changed: vocabulary changed (768 entries)"),
    ],
    ids=["merges reordered", "token renamed"],
)
def test_version_2_sees_edits_that_keep_every_count(base: GenerationTrace, edit: Any, reason: str) -> None:
    tok = _edited(edit)
    assert compare(base, _with(base, _edited(lambda model: None))).stale_reasons == ()  # the round trip alone
    assert compare(base, _with(base, tok)).stale_reasons == (reason,)


def test_a_version_1_snapshot_of_the_same_tokenizer_is_not_stale(base: GenerationTrace) -> None:
    for parts in (True, False):  # with the parts (issue 33 on), and without (the committed examples' snapshots)
        old = _as_version_1(base, tiny_tokenizer(), parts=parts)
        assert compare(old, base).stale_reasons == (), parts


def test_a_version_1_snapshot_still_sees_what_both_versions_define_alike(base: GenerationTrace) -> None:
    """The negative control of the cross-version rule: counts, added tokens and specials are still compared."""
    old = _as_version_1(base, tiny_tokenizer(), parts=True)
    added = tiny_tokenizer()
    added.add_tokens(["<x>", "<y>"])
    assert compare(old, _with(base, added)).stale_reasons == (
        "tokenizer changed: vocabulary size 768 -> 770, added tokens 4 -> 6",
    )
    padded = tiny_tokenizer()
    padded.pad_token = "<unk>"
    assert compare(old, _with(base, padded)).stale_reasons == (
        "tokenizer changed: special token pad_token '<pad>' -> '<unk>'",
    )
    bare = _as_version_1(base, tiny_tokenizer(), parts=False)
    assert compare(bare, _with(base, added)).stale_reasons == ("tokenizer changed: vocabulary size 768 -> 770",)


def test_version_2_parts_count_what_a_json_parse_counts() -> None:
    """The serialization is segmented by markers that cannot occur in a string or as a vocabulary entry: tokens
    spelled like the markers (and the keys) do not move them."""
    vocab = {ch: i for i, ch in enumerate('abcdefghijklmnopqrstuvwxyz{}[],:"\\')}
    for token in ("vocab", "merges", '},"merges":[', ',"vocab":{'):
        vocab[token] = len(vocab)
    merges = [("a", "b"), ("ab", "c"), ("v", "o")]
    for left, right in merges:
        vocab.setdefault(left + right, len(vocab))
    backend = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    parts = tokenizer_fingerprint(_fast(backend)).parts
    assert parts is not None
    assert (parts["vocab"], parts["merges"]) == (len(vocab), len(merges))


def test_a_model_without_merges_is_hashed_whole() -> None:
    fp = tokenizer_fingerprint(
        _fast(Tokenizer(models.WordLevel(vocab={"<unk>": 0, "a": 1, "b": 2}, unk_token="<unk>")))
    )
    assert fp.parts is not None and "model_hash" in fp.parts and "merges" not in fp.parts
    swapped = _fast(Tokenizer(models.WordLevel(vocab={"<unk>": 0, "a": 2, "b": 1}, unk_token="<unk>")))
    assert tokenizer_fingerprint(swapped).hash != fp.hash
