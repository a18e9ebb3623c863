"""The log-sum-exp record() and verify() store is computed a block of rows at a time (issue 32: a float64 copy of a
152k-token vocabulary per step cost more than generate()); its bits must be those of torch.logsumexp in float64 over
the whole tensor, so every snapshot recorded before stays byte-identical."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from pytest_genguard.hf._generation import Float64LogSoftmax, top_k_of

SHAPES = [(16, 4, 151936), (5, 1, 151936), (1, 1, 151936), (3, 3, 50257), (30, 4, 768), (7, 1, 768)]


@pytest.fixture(params=[1, 2], ids=["1 thread", "2 threads"])
def threads(request: pytest.FixtureRequest) -> Iterator[int]:
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(before)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_the_blocked_log_sum_exp_has_the_bits_of_the_whole_tensor_float64_one(
    shape: tuple[int, ...], threads: int
) -> None:
    generator = torch.Generator().manual_seed(sum(shape))
    logits = torch.randn(*shape, generator=generator) * 4
    logits.view(-1, shape[-1])[0, :3] = -torch.inf  # masked tokens, as processors leave them
    soft = Float64LogSoftmax.of(logits, 5)
    exact = torch.logsumexp(logits.double(), dim=-1)
    assert torch.equal(soft.lse, exact)
    ids = logits.argmax(dim=-1, keepdim=True)
    assert torch.equal(soft.at(ids), (logits.double().gather(-1, ids).squeeze(-1) - exact).float())
    # Negative control: the float32 log-sum-exp the rule avoids does not have these bits.
    assert not torch.equal(torch.logsumexp(logits, dim=-1).double(), exact)


def test_a_row_of_minus_infinity_and_a_row_with_an_infinite_max_are_as_torch_has_them() -> None:
    logits = torch.zeros(3, 768)
    logits[0] = -torch.inf
    logits[1, 5] = torch.inf
    ours, theirs = Float64LogSoftmax.of(logits, 5).lse, torch.logsumexp(logits.double(), dim=-1)
    assert ours.tolist()[0] == theirs.tolist()[0] == -float("inf") and ours[2] == theirs[2]
    assert ours[1].isnan() == theirs[1].isnan() or ours[1] == theirs[1]


@pytest.mark.parametrize("shape", [(16, 4, 151936), (3, 2, 50257), (2, 40000), (5, 768)], ids=str)
@pytest.mark.parametrize("k", [1, 5, 20])
def test_the_blocked_top_k_is_torch_topk(shape: tuple[int, ...], k: int) -> None:
    generator = torch.Generator().manual_seed(sum(shape) + k)
    logits = torch.randn(*shape, generator=generator) * 4
    logits[..., -1] = 50.0  # the best in the short last block
    logits.view(-1, shape[-1])[0, 1000 % shape[-1] : 1000 % shape[-1] + 300] = 40.0 + torch.arange(300.0)  # one block
    values, ids = top_k_of(logits, k)
    expected_values, expected_ids = logits.topk(k, dim=-1)
    assert torch.equal(values, expected_values) and torch.equal(ids, expected_ids)
    # Negative control: the blocks' first elements alone are not the top-k.
    firsts = logits[..., ::256]
    assert firsts.shape[-1] < k or not torch.equal(firsts.topk(k, dim=-1).values, expected_values)
