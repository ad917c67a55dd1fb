"""Constant tensors a decoding cycle reads again and again (slot and row indices, identity matrices, filled index
tables), made once per (kind, shape, value, device) and shared: building one is an operator a call, reading a
cached one none, and its address stays fixed (what a CUDA graph needs of its inputs). They are read-only: no caller
writes one in place (write into a copy). Under torch.compile a fresh tensor is traced instead, a constant of the
graph. Created outside inference mode, so training's autograd may save them for backward.
"""
from __future__ import annotations

import torch

_MADE: dict[tuple, torch.Tensor] = {}
_LIMIT = 4096  # distinct constants kept; past it the table starts over (shapes seen in one run are few)


def built_once(key: tuple, make) -> torch.Tensor:
    """The tensor `make()` builds, made once per `key` (a tuple naming its kind, shape, values and device)."""
    if torch.compiler.is_compiling():
        return make()
    found = _MADE.get(key)
    if found is None:
        if len(_MADE) >= _LIMIT:
            _MADE.clear()
        with torch.inference_mode(False):
            found = _MADE[key] = make()
    return found


def arange(start: int, end: int, device) -> torch.Tensor:
    """LongTensor [end - start]: start, start + 1, ..., end - 1."""
    device = torch.device(device)
    return built_once(("arange", start, end, device), lambda: torch.arange(start, end, device=device))


def row_index(batch: int, device) -> torch.Tensor:
    """LongTensor [batch, 1]: each row's index, beside a [batch, m] column index in advanced indexing."""
    device = torch.device(device)
    return built_once(("rows", batch, device), lambda: torch.arange(batch, device=device)[:, None])


def index_along(n: int, dim: int, dims: int, device) -> torch.Tensor:
    """LongTensor of `dims` dimensions holding 0, 1, ..., n - 1 along `dim` (size 1 elsewhere): an advanced index
    that broadcasts against the others."""
    device = torch.device(device)
    shape = [1] * dims
    shape[dim] = n
    return built_once(("along", n, dim, dims, device), lambda: torch.arange(n, device=device).view(shape))


def slot_numbers(batch: int, n: int, device) -> torch.Tensor:
    """LongTensor [batch, n]: 0, 1, ..., n - 1 in every row (what a scatter numbering n slots per row writes)."""
    device = torch.device(device)
    return built_once(("numbers", batch, n, device),
                      lambda: torch.arange(n, device=device).expand(batch, n).contiguous())


def filled(shape: tuple[int, ...], value, dtype: torch.dtype, device) -> torch.Tensor:
    """[*shape] of `value`."""
    device = torch.device(device)
    return built_once(("full", tuple(shape), value, dtype, device),
                lambda: torch.full(shape, value, dtype=dtype, device=device))


def eye(n: int, dtype: torch.dtype, device) -> torch.Tensor:
    """[n, n] identity."""
    device = torch.device(device)
    return built_once(("eye", n, dtype, device), lambda: torch.eye(n, dtype=dtype, device=device))


def lower_triangle(n: int, device) -> torch.Tensor:
    """bool [1, n, n]: True at and below the diagonal (each of n new tokens sees itself and those before it), for
    a batch of one (it broadcasts)."""
    device = torch.device(device)
    return built_once(("tril", n, device), lambda: torch.ones(1, n, n, dtype=torch.bool, device=device).tril())
