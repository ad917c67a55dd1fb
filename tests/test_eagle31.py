"""EAGLE-3.1 on the EAGLE-3 block (head.fc_norm, head.norm_output, as speculators defines them): trained through the
EAGLE objective with its norms learning, drafted by the engine's lean step as the module predicts, and refused on
other blocks. Its export against speculators' own classes: tests/test_export.py and make check-export."""
from __future__ import annotations

import pytest
import torch

from eagle_infer.errors import EagleError
from eagle_infer.head.head_runner import HeadRunner
from eagle_train.features.shards import Sample
from eagle_train.training.objective import Objective, collate, losses
from eagle_train.features.states import with_states
from eagle_train.training.train import HeadConf, TrainConfig, build_head_config, new_head
from tests.oracles import one_thread  # noqa: F401 (autouse)
from tests.tiny import tiny_target

EAGLE31 = HeadConf(block="eagle3", features="fused", fc_norm=True, norm_output=True)


@pytest.fixture(scope="module")
def target():
    return tiny_target(vocab=96, hidden=64, layers=8)


def test_an_eagle31_head_trains_its_norms(target):
    cfg = TrainConfig(draft_vocab_size=40, w_reg=0.0, ttt_steps=2)
    config = build_head_config(target, cfg, EAGLE31)
    gen = torch.Generator().manual_seed(0)
    samples = [Sample(torch.randint(0, 96, (12,), generator=gen), torch.ones(12), None) for _ in range(2)]
    samples = with_states(samples, target, tuple(config.feature_layers))
    head = new_head(config, target, cfg, samples)
    assert (config.fc_norm, config.norm_output, len(head.fc_norm)) == (True, True, 3)
    out = losses(head, collate(samples, torch.float32, "cpu", fused=True),
                 objective=Objective(w_cls=1.0, w_reg=0.0, ttt_steps=2, per="position"))
    out["loss"].backward()
    assert all(float(n.weight.grad.abs().sum()) > 0 for n in head.fc_norm) and "loss_2" in out


def test_the_engine_step_drafts_what_the_module_predicts(target):
    """The lean step (HeadRunner) over 7 positions against the trainable module: the same predicted features (the
    final norm's output) and draft logits."""
    config = build_head_config(target, TrainConfig(draft_vocab_size=40, w_reg=0.0), EAGLE31)
    head = new_head(config, target, TrainConfig(draft_vocab_size=40, seed=3), [
        Sample(torch.arange(40), torch.ones(40), None)]).eval()
    with torch.no_grad():
        for norm in head.fc_norm:
            norm.weight.uniform_(0.5, 1.5)
        gen = torch.Generator().manual_seed(1)
        features, tokens = torch.randn(1, 7, 3 * 64, generator=gen), torch.randint(0, 96, (1, 7), generator=gen)
        positions = torch.arange(7)[None]
        module = head(features, tokens, positions)
        runner = HeadRunner(head, target, packed=False)
        lean = runner(features, tokens, positions, runner.new_cache(1, 16), None)
    torch.testing.assert_close(lean, module, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(runner.draft_logits(lean), head.draft_logits(module), rtol=1e-5, atol=1e-4)


def test_eagle31_flags_on_another_block_are_one_line(target):
    with pytest.raises(EagleError, match="head.fc_norm and head.norm_output are EAGLE-3.1's, on the eagle3 block: "
                                         "expected them false for head.block=eagle") as err:
        build_head_config(target, TrainConfig(), HeadConf(features="last", fc_norm=True))
    assert "\n" not in str(err.value)
