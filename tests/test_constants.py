"""eagle_infer/constants.py: a cached constant is built once and shared, stays a normal tensor when first asked for
under inference mode (training's autograd may save it), and traces fresh under torch.compile."""
from __future__ import annotations

import torch

from eagle_infer import constants


def test_a_constant_is_built_once_and_shared():
    first = constants.arange(2, 6, "cpu")
    assert torch.equal(first, torch.tensor([2, 3, 4, 5])) and constants.arange(2, 6, "cpu") is first
    assert torch.equal(constants.row_index(3, "cpu"), torch.tensor([[0], [1], [2]]))
    assert torch.equal(constants.filled((2, 3), -1, torch.long, "cpu"), torch.full((2, 3), -1))
    assert torch.equal(constants.lower_triangle(3, "cpu"), torch.ones(1, 3, 3, dtype=torch.bool).tril())
    assert constants.filled((2,), 1, torch.float32, "cpu").dtype == torch.float32  # the dtype is part of the key
    assert constants.filled((2,), 1, torch.long, "cpu").dtype == torch.long


def test_a_constant_made_under_inference_mode_serves_autograd():
    with torch.inference_mode():
        index = constants.arange(0, 7, "cpu")
    assert not index.is_inference()
    x = torch.randn(7, requires_grad=True)
    x.gather(0, index.flip(0)).pow(2).sum().backward()  # gather saves its index for backward
    assert torch.allclose(x.grad, 2 * x.detach())


def test_a_constant_traces_under_torch_compile():
    def shifted(x):
        return x + constants.arange(1000, 1000 + x.shape[0], x.device)  # a range no other test asks for

    torch._dynamo.reset()
    compiled = torch.compile(shifted, fullgraph=True, backend="eager")
    assert torch.equal(compiled(torch.zeros(11, dtype=torch.long)), torch.arange(1000, 1011))
    # traced fresh: nothing cached (a graph reading the cache would guard on it and recompile as it grows)
    assert not any(key[:3] == ("arange", 1000, 1011) for key in constants._MADE)
    assert torch.equal(constants.arange(1000, 1011, "cpu") + 1, torch.arange(1001, 1012))
