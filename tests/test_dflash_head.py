"""The DFlash drafter (eagle_infer.head.dflash_head): its block logits equal speculators' DFlashDraftModel's on the
same weights and inputs, its context cache extended in steps and trimmed equals one built at once, its masks, its
checkpoint, and one-line refusals."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from eagle_infer.errors import EagleError
from eagle_infer.head.block_runner import BlockRunner
from eagle_infer.head.dflash_head import ContextKV, block_mask, cached_block_mask, extend, random_dflash_head, trim
from eagle_infer.head.head_checkpoint import load_head
from eagle_infer.models.packed import pack_available
from scripts import check_export
from tests.tiny import tiny_target

FORWARD_BOUND = 1e-5  # float32, the same weights and inputs
MASK = 95  # the tiny targets' vocabulary is 0..95 and has no tokenizer


def drafter(arch: str = "llama", **settings):
    target = tiny_target(vocab=96, layers=6, arch=arch, rope_theta=check_export.ROPE_THETA)
    settings = {"layers": 2, "block_size": 4, **settings}
    return check_export.perturbed(random_dflash_head(target, MASK, **settings))


@pytest.mark.skipif(check_export.unavailable() is not None, reason=str(check_export.unavailable()))
@pytest.mark.parametrize("arch,settings", [
    ("llama", {}),
    ("qwen3", {"draft_vocab": torch.randperm(96, generator=torch.Generator().manual_seed(1))[:40]}),
    ("mistral", {"sliding_window": 3}),
    ("llama", {"sliding_window": 3, "block_attention": "causal"}),
])
def test_block_logits_equal_speculators(arch, settings):
    """Every block of a 13-token context (all 9 anchors speculators samples when the loss mask is all ones): logits
    within 1e-5 and the same top-1 at every position; a 1 % change of one of speculators' k-norm weights moves them
    beyond the bound (the comparison can fail)."""
    head = drafter(arch, **settings)
    model = check_export.speculators_dflash(head)
    diff, top1, positions = check_export.compare_dflash(head, model, 13)
    assert diff <= FORWARD_BOUND and top1 == positions == 9 * 4, (diff, top1, positions)
    with torch.no_grad():
        model.layers[1].self_attn.k_norm.weight.mul_(1.01)
    assert check_export.compare_dflash(head, model, 13)[0] > 100 * FORWARD_BOUND


def test_context_built_in_steps_and_trimmed_drafts_as_built_at_once():
    """Decoding's cache: the context of 10 positions built as 6 + 4, and 10 trimmed to 7, draft what one built at
    once over the same positions drafts; rows of a batch with different committed lengths draft as alone."""
    head = drafter()
    gen = torch.Generator().manual_seed(0)
    fused = torch.randn(2, 10, 3 * 64, generator=gen)
    positions = torch.arange(10).expand(2, -1)
    bonus = torch.tensor([[5], [7]])
    with torch.no_grad():
        whole = head.context_kv(fused, positions)
        steps = extend(head.context_kv(fused[:, :6], positions[:, :6]), head.context_kv(fused[:, 6:], positions[:, 6:]))
        ten = torch.tensor([[10], [10]])
        assert torch.allclose(head.draft_block(steps, bonus, ten), head.draft_block(whole, bonus, ten), atol=1e-5)
        seven = torch.tensor([[7], [7]])
        cut = head.draft_block(trim(whole, 7), bonus, seven)
        assert torch.allclose(cut, head.draft_block(head.context_kv(fused[:, :7], positions[:, :7]), bonus, seven),
                              atol=1e-5)
        mixed = head.draft_block(whole, bonus, torch.tensor([[7], [10]]))
        assert torch.allclose(mixed[0], cut[0], atol=1e-5) and torch.allclose(mixed[1], head.draft_block(
            whole, bonus, ten)[1], atol=1e-5)
    assert isinstance(steps, ContextKV) and steps.keys.shape == (2, 2, 2, 10, 16)


@pytest.mark.parametrize("packed", [False, pytest.param(True, marks=pytest.mark.skipif(
    not pack_available(), reason="oneDNN not available"))])
@pytest.mark.parametrize("arch,settings", [
    ("llama", {}),
    ("qwen3", {}),
    ("llama", {"sliding_window": 3, "block_attention": "causal"}),
])
def test_a_block_runner_drafts_the_drafters_own_logits(packed, arch, settings):
    """BlockRunner.draft (lean steps over its context cache, packed for a packed target, its own copy of the LM-head
    rows of the draft vocabulary) equals the drafter's draft_block (its modules over a concatenated context) for
    every row of a batch whose rows hold 9 and 6 committed positions, and again after the block's uncommitted
    keys and values were left in the cache and a context write followed."""
    head = drafter(arch, draft_vocab=torch.randperm(96, generator=torch.Generator().manual_seed(3))[:40], **settings)
    target = replace(head.target, packed=packed)
    runner = BlockRunner(head, target)
    assert (runner.step.vocab_packed is not None) is packed and runner.step.vocab_weight.shape == (40, 64)
    fused = torch.randn(2, 10, 3 * 64, generator=torch.Generator().manual_seed(2))
    cache = runner.new_cache(2, 10)
    runner(fused[:, :9], None, torch.arange(9).expand(2, -1), cache, None)
    cache.advance(9)
    cache.truncate([9, 6])

    def own(row: int, length: int, bonus: int) -> torch.Tensor:
        with torch.no_grad():
            context = head.context_kv(fused[row : row + 1, :length], torch.arange(length)[None])
            return head.draft_block(context, torch.tensor([[bonus]]), torch.tensor([[length]]))[0]

    for bonus in ([3, 4], [5, 6]):  # the second block drafts over the first one's scratch slots
        drafted = runner.draft(cache, torch.tensor(bonus)[:, None], cache.length_column())
        assert drafted.shape == (2, 3, 40) and drafted.dtype == torch.float32
        torch.testing.assert_close(drafted, torch.stack([own(0, 9, bonus[0]), own(1, 6, bonus[1])]),
                                   rtol=1e-5, atol=1e-5)
    row = cache.row(1)  # row 1 commits position 6 (its state overwrites the block's scratch slot there)
    runner(fused[1:2, 6:7], None, torch.tensor([[6]]), row, None)
    cache.lengths[1] = 7
    drafted = runner.draft(cache, torch.tensor([[2], [8]]), cache.length_column())
    torch.testing.assert_close(drafted, torch.stack([own(0, 9, 2), own(1, 7, 8)]), rtol=1e-5, atol=1e-5)


def test_block_mask_sees_the_context_before_its_block_and_its_own_block():
    mask = block_mask(torch.tensor([[1, 3]]), 4, 2)[0, 0].int()
    assert mask.tolist() == [[1, 0, 0, 0, 1, 1, 0, 0], [1, 0, 0, 0, 1, 1, 0, 0],
                             [1, 1, 1, 0, 0, 0, 1, 1], [1, 1, 1, 0, 0, 0, 1, 1]]
    causal = block_mask(torch.tensor([[3]]), 4, 2, causal=True, window=1)[0, 0].int()
    assert causal.tolist() == [[0, 0, 1, 0, 1, 0], [0, 0, 1, 0, 1, 1]]


def test_a_cached_block_mask_sees_its_rows_context_and_the_block_after_it():
    """Decoding's mask: the block's keys sit in the cache right after each row's context, the slots past them
    (scratch, another row's longer context) unseen."""
    mask = cached_block_mask(torch.tensor([[1], [3]]), 6, 2).int()
    assert mask.shape == (2, 1, 2, 6)
    assert mask[0, 0].tolist() == [[1, 1, 1, 0, 0, 0]] * 2 and mask[1, 0].tolist() == [[1, 1, 1, 1, 1, 0]] * 2
    causal = cached_block_mask(torch.tensor([[3]]), 6, 2, causal=True, window=1)[0, 0].int()
    assert causal.tolist() == [[0, 0, 1, 1, 0, 0], [0, 0, 1, 1, 1, 0]]


def test_a_saved_drafter_loads_back_the_same(tmp_path):
    head = drafter(draft_vocab=torch.tensor([3, 1, 50, 7, 90]))
    head.save(tmp_path, dtype=torch.float32)
    loaded = load_head(tmp_path, head.target)
    assert type(loaded) is type(head) and loaded.config == head.config
    assert torch.equal(loaded.draft_vocab, head.draft_vocab)
    with torch.no_grad():
        fused = torch.randn(1, 6, 3 * 64)
        context, again = (h.context_kv(fused, torch.arange(6)[None]) for h in (head, loaded))
        bonus, length = torch.tensor([[4]]), torch.tensor([[6]])
        assert torch.equal(head.draft_block(context, bonus, length), loaded.draft_block(again, bonus, length))


@pytest.mark.parametrize("arch,settings,message", [
    ("qwen2", {}, "head.block=dflash builds drafters for llama, mistral, qwen3 targets, not a 'qwen2' one"),
    ("llama", {"block_size": 1}, "head.block_size 1 is invalid"),
    ("llama", {"block_attention": "causal"}, "head.sliding_window 0 with head.block_attention=causal"),
    ("llama", {"block_attention": "sideways"}, "unknown head.block_attention 'sideways'"),
])
def test_bad_settings_are_one_line(arch, settings, message):
    with pytest.raises(EagleError, match=message.replace("(", r"\(")) as err:
        drafter(arch, **settings)
    assert "\n" not in str(err.value)
