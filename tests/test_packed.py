"""Packed linear weights (eagle_infer.models.packed): same products as F.linear up to rounding (bfloat16 and float32),
parameters kept, gradients unpacked, the engine unchanged on a packed target, and the model.pack setting's choices
and errors."""
from __future__ import annotations

import pytest
import torch

from eagle_infer.head.draft_head import random_head
from eagle_infer.config import InferConf
from eagle_infer.decoding.engine import Engine
from eagle_infer.errors import EagleError
from eagle_infer.models.packed import PackedLinear, pack_available, pack_linears, resolve_pack
from eagle_infer.platform import cpu_has_bf16_matmul
from eagle_infer.models.target import load_target
from tests.tiny import tiny_target

needs_bf16_pack = pytest.mark.skipif(
    not (pack_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()), reason="oneDNN bfloat16 not available"
)
needs_pack = pytest.mark.skipif(not pack_available(), reason="oneDNN not available")
CPU = torch.device("cpu")
# each packable dtype, skipped where this CPU's oneDNN cannot pack it; and its rounding: the tolerance of a packed
# product, and of a packed model's logits as a share of their largest magnitude
PACKED_DTYPES = [pytest.param(torch.bfloat16, marks=needs_bf16_pack), pytest.param(torch.float32, marks=needs_pack)]
TOLERANCE = {torch.bfloat16: dict(atol=0.05, rtol=0.02), torch.float32: dict(atol=1e-4, rtol=1e-4)}
LOGIT_SHARE = {torch.bfloat16: 0.1, torch.float32: 1e-4}


@pytest.mark.parametrize("dtype", PACKED_DTYPES)
@pytest.mark.parametrize("rows", [1, 8, 33])
def test_packed_linear_matches_linear(rows, dtype):
    torch.manual_seed(0)
    linear = torch.nn.Linear(96, 160).to(dtype).requires_grad_(False)
    packed = PackedLinear.of(linear)
    assert packed.weight is linear.weight and packed.bias is linear.bias
    x = torch.randn(2, rows, 192, dtype=dtype)[..., ::2]  # 3-D and not contiguous
    want = x.double() @ linear.weight.double().T + linear.bias.double()
    with torch.inference_mode():
        got = packed(x)
    assert got.shape == (2, rows, 160) and got.dtype == dtype
    torch.testing.assert_close(got.double(), want, **TOLERANCE[dtype])


@needs_bf16_pack
def test_packed_linear_gradients_use_the_plain_weight():
    torch.manual_seed(0)
    linear = torch.nn.Linear(32, 16).to(torch.bfloat16)
    packed = PackedLinear.of(linear)
    x = torch.randn(4, 32, dtype=torch.bfloat16, requires_grad=True)
    packed(x).float().sum().backward()
    want = x.grad.clone()
    x.grad = None
    linear(x).float().sum().backward()
    assert torch.equal(x.grad, want)


@pytest.mark.parametrize("dtype", PACKED_DTYPES)
def test_engine_on_a_packed_target(dtype):
    """Packing swaps every linear layer of target and head; greedy EAGLE-2 on the packed target still equals vanilla
    decoding on it, and the logits stay within rounding of the unpacked model's."""
    target = tiny_target(vocab=96, dtype=dtype)
    ids = torch.tensor([[1, 5, 9, 14, 3, 7]])
    with torch.inference_mode():
        before = target.model(ids).logits
    head = random_head(target, seed=1)
    assert pack_linears(target.model) == 2 * 7 + 1 and pack_linears(head) == 1 + 7
    target.packed, head.packed = True, True
    with torch.inference_mode():
        after = target.model(ids).logits
    assert (after.argmax(-1) == before.argmax(-1)).float().mean() >= 0.8
    assert (after.float() - before.float()).abs().max() < LOGIT_SHARE[dtype] * before.float().abs().max()
    prompt = [1, 5, 9, 14, 3, 7, 11]
    vanilla = Engine(target, None, InferConf(method="vanilla")).generate(prompt, 24)
    eagle2 = Engine(target, head, InferConf(method="eagle2", depth=3, top_k=3, total_tokens=8)).generate(prompt, 24)
    assert eagle2.tokens == vanilla.tokens and len(vanilla.tokens) == 24


def test_resolve_pack():
    """auto packs the CPU's native dtype only: bfloat16 with native bfloat16 matmuls, float32 without."""
    native = cpu_has_bf16_matmul()
    assert resolve_pack("off", torch.bfloat16, CPU) is False
    assert resolve_pack("auto", torch.bfloat16, CPU) is (pack_available() and native)
    assert resolve_pack("auto", torch.float32, CPU) is (pack_available() and not native)
    assert resolve_pack("auto", torch.bfloat16, torch.device("cuda")) is False
    if pack_available():
        assert resolve_pack("on", torch.float32, CPU) is True
    with pytest.raises(EagleError) as err:
        resolve_pack("on", torch.float16, CPU)
    assert "model.pack=on" in str(err.value) and "float16" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(EagleError, match="model.pack=on needs bfloat16 or float32 on a CPU with oneDNN, not float32 on cuda"):
        resolve_pack("on", torch.float32, torch.device("cuda"))
    with pytest.raises(EagleError, match="unknown model.pack 'yes': expected one of auto, on, off"):
        resolve_pack("yes", torch.bfloat16, CPU)


@pytest.mark.skipif(not pack_available(), reason="oneDNN not available")
def test_load_target_packs_where_auto_says_and_memory_allows(tmp_path, smol_tok, monkeypatch):
    import eagle_infer.models.target as engine_mod
    from tests.conftest import make_tiny_smol

    make_tiny_smol(smol_tok).model.save_pretrained(tmp_path)
    smol_tok.save_pretrained(tmp_path)
    native, other = ("bfloat16", "float32") if cpu_has_bf16_matmul() else ("float32", "bfloat16")
    packed = load_target(str(tmp_path), native, "cpu", "auto")
    assert packed.packed and isinstance(packed.lm_head, PackedLinear)
    assert not load_target(str(tmp_path), native, "cpu", "off").packed
    assert not load_target(str(tmp_path), other, "cpu", "auto").packed
    monkeypatch.setattr(engine_mod, "available_memory", lambda device: 1 << 20)  # the packed copy would not fit
    assert not load_target(str(tmp_path), native, "cpu", "auto").packed
