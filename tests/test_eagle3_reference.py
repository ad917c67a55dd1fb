"""EAGLE-3's training objective checked against the reference trainer's own numbers.

tests/fixtures/eagle3_reference.json holds what SafeAILab/EAGLE's EAGLE-3 trainer (eagle/traineagle3/cnets.py, the
commit named in the file) computed on the case of tests/eagle3_reference_case.py: per step of its 7-step
training-time test, the loss and the accuracy at each of three SGD iterations, and every draft parameter's gradient
norm at the first. This toolkit's path gives the same numbers: the fused features featurize stores, the eagle3 head
as training builds it (with the weights loaded through the published-checkpoint loader), and
eagle_train.training.objective.losses with the reference's settings (7 steps = ttt_steps 6, step weights 0.8^k, no feature
regression, sums over positions whose target argmax is a draft token, divided by B x T).

Tolerance: 1e-5 relative on losses and gradient norms, 1e-6 absolute on accuracies (float32; the two compute
attention and sums in other orders). Two mutations show the check can fail: step weights 0.7^k instead of 0.8^k
(the later iterations move), and a training-time-test mask that lets a chain's step see the real pairs after its
start (every step after the first moves).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM

from eagle_infer.head import chain_attention
from eagle_infer.head.draft_head import DraftHead
from eagle_infer.head.head_checkpoint import load_head
from eagle_infer.models.target import Target, with_decoder
from eagle_train.features.featurize import target_features
from eagle_train.features.shards import Sample
from eagle_train.training.objective import Objective, collate, losses
from eagle_train.training.train import HeadConf, TrainConfig, build_head_config
from tests import eagle3_reference_case as case
from tests.oracles import one_thread  # noqa: F401 (autouse)

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "eagle3_reference.json").read_text())
REFERENCE_OBJECTIVE = Objective(w_cls=1.0, w_reg=0.0, ttt_steps=case.LENGTH - 1, decay=case.STEP_WEIGHT,
                                per="position", draftable_only=True)
RTOL, ACC_ATOL = 1e-5, 1e-6


@pytest.fixture(scope="module")
def target():
    config = LlamaConfig(**case.TARGET)
    config._attn_implementation = "sdpa"
    model = LlamaForCausalLM(config).eval().requires_grad_(False)
    model.load_state_dict(case.target_state())
    return with_decoder(Target("eagle3-reference-case", model, None, "chatml", torch.float32, torch.device("cpu")))


@pytest.fixture(scope="module")
def batch(target):
    """The case's batch as featurize stores it: fused features per row, loss_mask on the predicted token."""
    ids, _, loss_ref = case.batch()
    rows = [ids[r, :n].tolist() for r, n in enumerate(case.ROWS)]
    head_config = build_head_config(target, TrainConfig(draft_vocab_size=case.DRAFT_VOCAB, w_reg=0.0),
                                    HeadConf(block="eagle3", features="fused"))
    feats = target_features(target, rows, head_config.feature_layers)
    samples = []
    for r, (n, (hidden, aux)) in enumerate(zip(case.ROWS, feats)):
        loss_mask = torch.zeros(n)
        loss_mask[2:] = loss_ref[r, : n - 2].float()
        samples.append(Sample(torch.tensor(rows[r]), loss_mask, hidden, aux))
    return collate(samples, torch.float32, torch.device("cpu"), fused=True)


def reference_head(target, tmp_path) -> DraftHead:
    """The case's draft model written in the published EAGLE-3 layout, loaded, and moved into the head training
    builds (whose config must be the loaded one's)."""
    ids = case.draft_ids()
    t2d = torch.zeros(case.TARGET["vocab_size"], dtype=torch.bool)
    t2d[ids] = True
    save_file({**case.draft_state(), "d2t": ids - torch.arange(ids.numel()), "t2d": t2d}, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({**case.TARGET, "num_hidden_layers": 1,
                                                      "draft_vocab_size": case.DRAFT_VOCAB}))
    loaded = load_head(tmp_path, target)
    config = build_head_config(target, TrainConfig(draft_vocab_size=case.DRAFT_VOCAB, w_reg=0.0),
                               HeadConf(block="eagle3", features="fused"))
    assert (config.block, config.feature_layers, config.draft_vocab_size) == (
        loaded.config.block, loaded.config.feature_layers, loaded.config.draft_vocab_size)
    head = DraftHead(config, target)
    head.load_state_dict(loaded.state_dict())
    return head.train()


PUBLISHED = {"fuse.weight": "fc.weight", "norm.weight": "norm.weight", "lm_head.weight": "lm_head.weight"}


def published_name(name: str) -> str:
    return PUBLISHED.get(name) or "midlayer." + name[len("layers.0."):]


def run(head, batch, objective: Objective) -> tuple[list[dict], dict[str, float]]:
    """ITERATIONS SGD steps as the fixture's: per iteration the total loss, per-step losses and accuracies; and the
    gradient norms of the first, by published name."""
    params = {n: p for n, p in head.named_parameters() if p.requires_grad}
    optimizer = torch.optim.SGD(params.values(), lr=case.SGD_LR)
    iterations, norms = [], {}
    for it in range(case.ITERATIONS):
        optimizer.zero_grad()
        out = losses(head, batch, objective=objective, accuracy=True)
        out["loss"].backward()
        if it == 0:
            norms = {published_name(n): float(p.grad.norm()) for n, p in params.items()}
        steps = range(objective.ttt_steps + 1)
        iterations.append({
            "loss": out["loss"].item(),
            "plosses": [float(out["cls_loss"] if k == 0 else out[f"loss_{k}"]) for k in steps],
            "acces": [float(out["top1"] if k == 0 else out[f"top1_{k}"]) for k in steps],
        })
        optimizer.step()
    return iterations, norms


def matches(ours: list[dict], norms: dict[str, float]) -> bool:
    theirs = FIXTURE["iterations"]
    close = all(
        torch.allclose(torch.tensor(a[key]), torch.tensor(b[key]), rtol=RTOL, atol=0)
        for a, b in zip(ours, theirs) for key in ("loss", "plosses"))
    accurate = all(torch.allclose(torch.tensor(a["acces"]), torch.tensor(b["acces"]), rtol=0, atol=ACC_ATOL)
                   for a, b in zip(ours, theirs))
    names = sorted(FIXTURE["grad_norms"])
    graded = sorted(norms) == names and torch.allclose(
        torch.tensor([norms[n] for n in names]), torch.tensor([FIXTURE["grad_norms"][n] for n in names]), rtol=RTOL, atol=0)
    return close and accurate and graded


def test_fixture_names_its_reference():
    assert FIXTURE["reference"] == "https://github.com/SafeAILab/EAGLE" and len(FIXTURE["commit"]) == 40
    assert len(FIXTURE["iterations"]) == case.ITERATIONS
    assert all(len(it["plosses"]) == case.LENGTH for it in FIXTURE["iterations"])


def test_objective_matches_the_reference_trainer(target, batch, tmp_path):
    ours, norms = run(reference_head(target, tmp_path), batch, REFERENCE_OBJECTIVE)
    for a, b in zip(ours, FIXTURE["iterations"]):
        torch.testing.assert_close(torch.tensor(a["plosses"]), torch.tensor(b["plosses"]), rtol=RTOL, atol=0)
        torch.testing.assert_close(torch.tensor(a["acces"]), torch.tensor(b["acces"]), rtol=0, atol=ACC_ATOL)
        torch.testing.assert_close(a["loss"], b["loss"], rtol=RTOL, atol=0)
    assert matches(ours, norms)
    # Not a vacuous case: the iterations move, and later steps score above zero.
    assert len({round(it["loss"], 4) for it in ours}) == case.ITERATIONS
    assert max(max(it["acces"]) for it in ours) > 0.2


def test_other_step_weights_fail_the_check(target, batch, tmp_path):
    mutated = Objective(**{**REFERENCE_OBJECTIVE.__dict__, "decay": 0.7})
    assert not matches(*run(reference_head(target, tmp_path), batch, mutated))


def test_a_leaky_ttt_mask_fails_the_check(target, batch, tmp_path, monkeypatch):
    real = chain_attention.real_visible
    # a chain's step also sees the real pairs after its start
    monkeypatch.setattr(chain_attention, "real_visible", lambda n, step, device: real(n, 0, device))
    assert not matches(*run(reference_head(target, tmp_path), batch, REFERENCE_OBJECTIVE))
