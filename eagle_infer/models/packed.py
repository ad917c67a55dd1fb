"""Linear weights reordered once into oneDNN's blocked layout (what inductor's freezing does for a compiled model),
for inference on a CPU in its native dtype.

A decode step multiplies a few rows by every weight of the model, so it is bound by how fast the matmul kernel
streams weights; eager `F.linear` hands oneDNN (bfloat16) or MKL (float32) a plain weight on every call, the packed
form skips that preparation. Where it pays: bfloat16 on CPUs with native bfloat16 matmuls, and float32 on CPUs
without them (AVX2 only), whose native dtype it is: there MKL's float32 product of 2 to 8 rows costs about twice one
row's, oneDNN's packed one about one row's (scripts/bench_engine.py prints packed and unpacked forwards side by side,
and whether their logits are equal bit for bit over the same cache). Where they differ it is by rounding, as between
forwards of different widths, and every method of a run shares the one packed target, so comparisons stay like for
like.
Memory: the packed copy doubles the weights' footprint (and the target's lean steps add packed q/k/v and gate/up
products, eagle_infer/models/lean_layer.py), so model.pack=auto skips packing (with a warning) where the copies would take
more than half of the memory available.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..errors import EagleError
from ..platform import resolve_dtype

PACK_CHOICES = ("auto", "on", "off")
PACKABLE = (torch.bfloat16, torch.float32)
ROWS_HINT = 32  # rows the reorder is tuned for: a verified tree's size (one-token steps run as fast with it)


def pack_available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def resolve_pack(name: str, dtype: torch.dtype, device: torch.device) -> bool:
    """'auto': pack where `dtype` is the CPU's native one (platform.resolve_dtype's 'auto': bfloat16 on a CPU with
    native bfloat16 matmuls, float32 on one without); 'on' wherever oneDNN can (bfloat16 or float32 on a CPU); 'off'
    never."""
    if name not in PACK_CHOICES:
        raise EagleError(f"unknown model.pack {name!r}: expected one of {', '.join(PACK_CHOICES)}")
    if name == "off":
        return False
    possible = device.type == "cpu" and dtype in PACKABLE and pack_available()
    if name == "on" and not possible:
        raise EagleError(f"model.pack=on needs bfloat16 or float32 on a CPU with oneDNN, not "
                         f"{str(dtype).removeprefix('torch.')} on {device.type}: use model.pack=auto or off")
    return possible and (name == "on" or dtype == resolve_dtype("auto", device))


class PackedLinear(torch.nn.Module):
    """y = x W^T + b with W packed for oneDNN. `weight` and `bias` stay the original parameters (tied weights stay
    tied; code reading them directly is unaffected); a forward that needs gradients uses them unpacked."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None):
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.weight, self.bias = weight, bias
        self._packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), ROWS_HINT)

    @classmethod
    def of(cls, linear: torch.nn.Module | None) -> "PackedLinear | None":
        """`linear` packed (None stays None; a PackedLinear is returned as it is)."""
        if linear is None or isinstance(linear, PackedLinear):
            return linear
        return cls(linear.weight, linear.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad):
            return F.linear(x, self.weight, self.bias)
        y = torch.ops.mkldnn._linear_pointwise(x.reshape(-1, self.in_features), self._packed, self.bias, "none", [], "")
        return y.view(*x.shape[:-1], self.out_features)


def vocab_logits(x: torch.Tensor, weight: torch.Tensor, packed: PackedLinear | None) -> torch.Tensor:
    """x [..., H] -> float32 logits [..., V] over the rows of weight [V, H]: through `packed` (its packed copy) where
    x has weight's dtype, else a plain product with weight cast to x's dtype."""
    if packed is not None and x.dtype == weight.dtype:
        y = packed(x)
    else:
        y = F.linear(x, weight if weight.dtype == x.dtype else weight.to(x.dtype))
    return y if y.dtype == torch.float32 else y.float()  # (Tensor.float() would dispatch an operator even then)


def linear_bytes(module: torch.nn.Module) -> int:
    """Bytes of the weights pack_linears(module) would copy."""
    return sum(m.weight.numel() * m.weight.element_size() for m in module.modules() if isinstance(m, torch.nn.Linear))


def pack_linears(module: torch.nn.Module) -> int:
    """Replace every nn.Linear under `module` (in place) by a PackedLinear; returns how many."""
    count = 0
    for name, child in module.named_children():
        if isinstance(child, torch.nn.Linear):
            setattr(module, name, PackedLinear.of(child))
            count += 1
        else:
            count += pack_linears(child)
    return count
