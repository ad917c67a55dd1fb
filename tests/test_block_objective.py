"""The block drafters' objective (eagle_train.training.block_objective) against speculators' own functions: DFlash's slot
weights (dflash_loss_decay), D-PACE's (dpace_loss_decay), the weighted, normalised loss (loss_function with its eager
KL), and the whole loss of a batch (DFlashDraftModel.forward); and the anchors sampled."""
from __future__ import annotations

from functools import partial

import pytest
import torch

from eagle_train.training.block_objective import (BlockObjective, block_loss, block_losses, decay_weights, dpace_weights,
                                         sample_anchors)
from scripts import check_export

BLOCK = 8
needs_speculators = pytest.mark.skipif(check_export.unavailable() is not None, reason=str(check_export.unavailable()))


def random_case(blocks: int = 5, vocab: int = 30, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    logits, targets = torch.randn(blocks, BLOCK, vocab, generator=gen), 3 * torch.randn(blocks, BLOCK, vocab, generator=gen)
    counted = (torch.rand(blocks, BLOCK, generator=gen) > 0.2).float()
    counted[:, 0] = 0  # the bonus slot never counts
    return logits, targets, counted


@needs_speculators
@pytest.mark.parametrize("gamma", [4.0, 7.0])
def test_decay_weights_are_speculators(gamma):
    from speculators.losses.utils import dflash_loss_decay

    positions = torch.arange(3 * BLOCK) % BLOCK
    assert torch.equal(decay_weights(BLOCK, gamma).repeat(3), dflash_loss_decay(positions.float(), gamma))


@needs_speculators
@pytest.mark.parametrize("weighting", ["decay", "dpace"])
def test_loss_is_speculators(weighting):
    """Our weighted loss over 5 blocks equals speculators' loss_function (eager KL, its decay or D-PACE weights) on
    the same logits, target logits and mask, within 1e-6."""
    from speculators.losses.eager import kl_div_loss
    from speculators.losses.utils import dflash_loss_decay, dpace_loss_decay, loss_function

    logits, targets, counted = random_case()
    objective = BlockObjective(gamma=7.0, weighting=weighting, dpace_alpha=0.3)
    ours = block_loss(logits, targets.softmax(-1), counted, objective)
    decay = (partial(dflash_loss_decay, gamma=7.0) if weighting == "decay" else
             partial(dpace_loss_decay, loss_mask=counted.flatten()[None], block_size=BLOCK, dpace_alpha=0.3))
    theirs = loss_function(logits.flatten(0, 1)[None], targets.flatten(0, 1)[None], counted.flatten()[None],
                           (torch.arange(5 * BLOCK) % BLOCK)[None], loss_fn=kl_div_loss, decay_fn=decay)
    assert torch.allclose(ours, theirs, rtol=1e-6), (float(ours), float(theirs))


def test_dpace_weights_are_expected_accepted_slots():
    """One block, confidences c = exp(-loss) unsmoothed (alpha 0): slot j's weight is sum_{i >= j} c_1 ... c_i."""
    loss = torch.tensor([[0.0, 0.1, 0.5, 2.0]])
    counted = torch.tensor([[0.0, 1.0, 1.0, 1.0]])
    c = torch.exp(-loss[0])
    expected = torch.tensor([0.0, c[1] + c[1] * c[2] + c[1] * c[2] * c[3], c[1] * c[2] + c[1] * c[2] * c[3],
                             c[1] * c[2] * c[3]])
    assert torch.allclose(dpace_weights(loss, counted, 0.0)[0], expected)


def test_anchors_are_loss_positions_whose_block_fits():
    mask = torch.tensor([[0, 1, 1, 1, 1, 1, 0, 0], [0, 0, 0, 1, 1, 0, 0, 0]]).float()
    anchors, valid = sample_anchors(mask, torch.tensor([8, 6]), 10, 3, torch.Generator().manual_seed(0))
    assert anchors[0][valid[0]].tolist() == [1, 2, 3, 4, 5] and anchors[1][valid[1]].tolist() == [3]
    anchors, valid = sample_anchors(mask, torch.tensor([8, 6]), 2, 3, torch.Generator().manual_seed(0))
    assert valid.tolist() == [[True, True], [True, False]] and anchors[0, 0] < anchors[0, 1] and anchors[1, 0] == 3


@needs_speculators
@pytest.mark.parametrize("weighting", ["decay", "dpace"])
def test_whole_loss_is_speculators_forward(weighting):
    """block_losses over a 13-token row equals speculators' DFlashDraftModel.forward loss (eager KL) with the same
    weights, states and anchors: every position its loss mask allows (all but position T - B, which speculators
    never anchors; then both sample every allowed anchor, sorted), within 1e-5 relative."""
    from speculators.losses.eager import kl_div_loss

    from eagle_infer.head.dflash_head import random_dflash_head
    from eagle_train.training.objective import Batch
    from tests.tiny import tiny_target

    target = tiny_target(vocab=96, layers=6)
    head = check_export.perturbed(random_dflash_head(target, 95, layers=2, block_size=4))
    model = check_export.speculators_dflash(head)
    features, tokens = check_export.dflash_inputs(head, 13)
    last = torch.randn(1, 13, 64, generator=torch.Generator().manual_seed(5))  # the target's pre-norm last states
    loss_mask = torch.ones(1, 13)
    loss_mask[0, 13 - 4] = 0
    objective = BlockObjective(anchors=13 - 4, gamma=4.0, weighting=weighting, dpace_alpha=0.5)
    with torch.no_grad():
        batch = Batch(tokens, loss_mask, target.model.model.norm(last), features, torch.tensor([13]))
        ours = block_losses(head, batch, objective)["loss"]
        _, theirs, _ = model(features, tokens, loss_mask, last, torch.zeros_like(tokens), gamma=4.0, max_anchors=13 - 4,
                             loss_config={"kl_div": (kl_div_loss, 1.0)},
                             per_position_loss_weight="fixed-exp-decay" if weighting == "decay" else "dpace")
    assert torch.allclose(ours, theirs, rtol=1e-5), (float(ours), float(theirs))
