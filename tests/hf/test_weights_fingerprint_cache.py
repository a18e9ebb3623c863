"""The weights hash is computed once per model state, not once per call: an unchanged model is fingerprinted without
reading its weights, and every way of changing a weight changes the fingerprint (each case checked against a fresh
hash of every weight)."""

from __future__ import annotations

import copy
import gc
import hashlib
import weakref
from collections.abc import Callable
from typing import Any

import pytest
import torch

from pytest_genguard.hf import weights_hash as weights_module, weights_watch
from pytest_genguard.hf.fingerprint import model_fingerprint
from pytest_genguard.hf.record import record
from pytest_genguard.hf.tiny import tiny_model, tiny_tokenizer
from pytest_genguard.hf.weights_hash import forget_weights, weights_hash

WEIGHT = "transformer.h.0.mlp.c_fc.weight"  # 2-D (Conv1D: [in, out])
BIAS = "transformer.h.0.mlp.c_fc.bias"


@pytest.fixture
def model() -> Any:
    """The tiny GPT-2 with a persistent buffer (its own buffers are not in the state dict)."""
    built = tiny_model("gpt2")
    built.transformer.h[0].register_buffer("counter", torch.zeros(3))
    return built


@pytest.fixture
def full_hashes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the hashes that read every weight."""
    calls: list[int] = []
    real = weights_module.state_dict_sha256

    def counting(state: Any) -> str:
        calls.append(1)
        return real(state)

    monkeypatch.setattr(weights_module, "state_dict_sha256", counting)
    return calls


def _param(model: Any, name: str = WEIGHT) -> torch.nn.Parameter:
    return dict(model.named_parameters())[name]


def _by_definition(model: Any) -> str:
    """The weights hash as defined (and stored in every snapshot): sha256 over the state dict sorted by name."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        t = tensor.detach().cpu().contiguous()
        digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def test_the_cached_hash_is_the_hash_by_definition(model: Any) -> None:
    assert weights_hash(model) == weights_hash(model) == _by_definition(model)
    assert weights_hash(model, cached=False) == _by_definition(model)


def test_an_unchanged_model_is_fingerprinted_again_without_reading_its_weights(
    model: Any, full_hashes: list[int]
) -> None:
    first = model_fingerprint(model)
    assert len(full_hashes) == 1
    for _ in range(3):
        assert model_fingerprint(model) == first
    model.train()
    model.eval()  # modes, grads and a forward pass are not weight changes
    model(torch.tensor([[1, 2, 3]])).logits.sum().backward()
    assert weights_hash(model) == first.weights_hash
    assert len(full_hashes) == 1


def test_record_hashes_the_weights_once_not_on_every_call(model: Any, full_hashes: list[int]) -> None:
    tokenizer = tiny_tokenizer()
    traces = [record(model, tokenizer, ["the quick", "a"], max_new_tokens=3) for _ in range(3)]
    assert len(full_hashes) == 1
    assert {t.model.weights_hash for t in traces if t.model} == {_by_definition(model)}


def _optimizer_step(kind: str) -> Callable[[Any], None]:
    def step(model: Any) -> None:
        params = list(model.parameters())
        optimizer: torch.optim.Optimizer
        if kind == "sgd":
            optimizer = torch.optim.SGD(params, lr=0.1)
        elif kind == "adamw-foreach":
            optimizer = torch.optim.AdamW(params, lr=1e-2, foreach=True)
        else:
            optimizer = torch.optim.AdamW(params, lr=1e-2, fused=True)
        model.train()
        model(torch.tensor([[1, 2, 3, 4]]), labels=torch.tensor([[1, 2, 3, 4]])).loss.backward()
        optimizer.step()
        model.eval()

    return step


def _other_weights() -> dict[str, torch.Tensor]:
    other = tiny_model("gpt2", seed=1)
    other.transformer.h[0].register_buffer("counter", torch.ones(3))
    return other.state_dict()


def _no_grad(fn: Callable[[torch.nn.Parameter], Any]) -> Callable[[Any], None]:
    def change(model: Any) -> None:
        with torch.no_grad():
            fn(_param(model))

    return change


def _replace_module(model: Any) -> None:
    model.transformer.h[0].mlp = copy.deepcopy(tiny_model("gpt2", seed=1).transformer.h[0].mlp)


def _resize(model: Any) -> None:
    model.resize_token_embeddings(model.config.vocab_size + 8)


def _register_buffer(model: Any) -> None:
    model.transformer.h[0].register_buffer("extra", torch.zeros(3))


def _unpersist(model: Any) -> None:
    del model.transformer.h[0].counter
    model.transformer.h[0].register_buffer("counter", torch.zeros(3), persistent=False)


def _rename(model: Any) -> None:
    model.transformer.h[0].mlp.add_module("renamed", model.transformer.h[0].mlp.act)
    del model.transformer.h[0].mlp.act


def _numpy_write(model: Any) -> None:
    _param(model).detach().numpy()[:] *= 2.0


CHANGES: dict[str, Callable[[Any], None]] = {
    # tracked by the version counter
    "SGD step": _optimizer_step("sgd"),
    "AdamW step (foreach)": _optimizer_step("adamw-foreach"),
    "AdamW step (fused)": _optimizer_step("adamw-fused"),
    "load_state_dict": lambda m: m.load_state_dict(_other_weights()),
    "param.add_ under no_grad": _no_grad(lambda p: p.add_(1e-3)),
    "nn.init under no_grad": _no_grad(torch.nn.init.normal_),
    "param.detach().mul_": lambda m: _param(m).detach().mul_(1.5),
    "one element under no_grad": _no_grad(lambda p: p[0, 1].fill_(7.0)),
    "a buffer in place": lambda m: m.transformer.h[0].counter.add_(1),
    # new storages, tensors, names, shapes or dtypes
    "load_state_dict(assign=True)": lambda m: m.load_state_dict(_other_weights(), assign=True),
    "param.data = ...": lambda m: setattr(_param(m), "data", _param(m).detach() + 1e-3),
    "a new Parameter on the module": lambda m: setattr(
        m.transformer.h[0].mlp.c_fc, "weight", torch.nn.Parameter(_param(m).detach() * 2.0)
    ),
    "a replaced submodule": _replace_module,
    ".to(float64)": lambda m: m.to(torch.float64),
    ".half()": lambda m: m.half(),
    ".to(bfloat16)": lambda m: m.to(torch.bfloat16),
    "resize_token_embeddings": _resize,
    "a new persistent buffer": _register_buffer,
    "a buffer made non-persistent": _unpersist,
    # writes torch does not track: caught by the sampled elements
    "param.data.add_": lambda m: _param(m).data.add_(1e-3),
    "param.data.copy_": lambda m: _param(m).data.copy_(torch.randn(_param(m).shape)),
    "param.data.normal_": lambda m: _param(m).data.normal_(),
    "a row through .data": lambda m: _param(m).data[5].fill_(0.5),
    "a column through .data": lambda m: _param(m).data[:, 3].fill_(0.5),
    "a bias through .data": lambda m: _param(m, BIAS).data[7].fill_(0.5),
    "a numpy view": _numpy_write,
}


@pytest.mark.parametrize("change", list(CHANGES), ids=list(CHANGES))
def test_every_way_of_changing_a_weight_changes_the_fingerprint(model: Any, change: str) -> None:
    before = weights_hash(model)
    assert weights_hash(model) == before  # remembered
    CHANGES[change](model)
    after = weights_hash(model)
    assert after != before, f"{change}: the fingerprint did not change"
    assert after == _by_definition(model), f"{change}: the cached fingerprint is not the hash of the weights now"


def test_a_storage_freed_and_replaced_at_the_same_address_is_a_change(model: Any) -> None:
    """`param.data = t` keeps the parameter's version counter; a new storage at the old one's address (the allocator
    reuses addresses) with an edit outside the sampled elements is still seen: storages are compared by identity."""
    import numpy as np

    param = _param(model)
    memory = param.detach().numpy().copy()
    param.data = torch.from_numpy(memory)
    before = weights_hash(model)
    address, version = param.data_ptr(), param._version
    param.data = torch.zeros_like(param)  # the first storage over `memory` is freed
    memory[0, 1] += 1.0  # neither the first column nor the diagonal: not sampled
    param.data = torch.from_numpy(memory)  # a new storage, same address, same version counter
    assert (param.data_ptr(), param._version) == (address, version)
    assert isinstance(memory, np.ndarray)
    after = weights_hash(model)
    assert after != before and after == _by_definition(model)


def test_a_fused_optimizer_step_is_a_change_though_it_leaves_the_version_counter_and_the_sample_alone(
    model: Any,
) -> None:
    param = _param(model)
    before = weights_hash(model)
    version = param._version
    grad = torch.zeros_like(param)
    grad[0, 1] = 1.0  # only an element outside the sample moves (Adam's first step moves where the gradient is)
    param.grad = grad
    torch.optim.AdamW([param], lr=0.1, weight_decay=0.0, fused=True).step()
    assert param._version == version, "precondition: the fused kernel does not bump the version counter"
    after = weights_hash(model)
    assert after != before and after == _by_definition(model)


def test_a_single_element_written_through_data_away_from_the_samples_is_seen_after_forget_weights(model: Any) -> None:
    before = weights_hash(model)
    _param(model).data[0, 1] += 1.0  # untracked by torch and not sampled (see pytest_genguard.hf.weights_watch)
    forget_weights(model)
    after = weights_hash(model)
    assert after != before and after == _by_definition(model)


def test_models_with_the_same_weights_share_a_fingerprint_and_each_is_hashed_once(full_hashes: list[int]) -> None:
    a, b = tiny_model("gpt2"), tiny_model("gpt2")
    assert weights_hash(a) == weights_hash(b) == weights_hash(copy.deepcopy(a))
    assert weights_hash(a) == weights_hash(b)
    assert len(full_hashes) == 3


def test_the_cache_keeps_neither_models_nor_replaced_weights_alive() -> None:
    model = tiny_model("gpt2")
    weights_hash(model)
    param = _param(model)
    old = weakref.ref(param.untyped_storage())
    param.data = param.detach().clone()
    gc.collect()
    assert old() is None, "the cache holds the replaced weights"
    watched = weights_watch.watched()
    gone = weakref.ref(model)
    del model, param
    gc.collect()
    assert gone() is None, "the cache holds the model"
    assert weights_watch.watched() == watched - 1


def test_a_model_whose_tensors_have_no_version_counter_is_hashed_on_every_call(full_hashes: list[int]) -> None:
    with torch.inference_mode():
        model = tiny_model("gpt2")
    first = weights_hash(model)
    with torch.inference_mode():
        _param(model).add_(1.0)  # inference tensors: no version counter to tell
    assert weights_hash(model) != first
    assert weights_hash(model) == _by_definition(model)
    assert len(full_hashes) == 3
