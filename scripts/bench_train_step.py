"""Training-step speed: the head's forward and backward over right-padded batches against row by row over each
row's real tokens (what eagle_train.objective.losses runs), side by side in one run.

Both sides compute the full training loss (eagle_train.objective.losses) on the same micro batches of 4 held-out
conversations in training's order, under training's bfloat16 autocast where the CPU has native bfloat16 matmuls; the
padded side swaps in the batch-wide ttt_outputs for the row-by-row one. Timings alternate which side goes first.
Prints the machine, each configuration's loss tokens/s on both sides, their ratio, and the largest difference of the
two losses (rounding only: every attention is causal).

usage: python scripts/bench_train_step.py [--features DIR] [--blocks eagle,eagle3] [--rounds 2] [--threads 2]
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

import eagle_train.objective as objective_mod
from eagle_infer.draft_head import DraftHead
from eagle_infer.platform import cache_root, cpu, resolve_dtype
from eagle_infer.target import load_target
from eagle_train.features import read_samples
from eagle_train.train import HeadConf, TrainConfig, build_head_config, micro_batches, objective

# The ablation's rows: the shipped EAGLE-1 block (two layers, last-layer features) and EAGLE-3's block with K = 7.
SETTINGS = {
    "eagle": (TrainConfig(draft_vocab_size=8192), HeadConf(layers=2)),
    "eagle3": (TrainConfig(draft_vocab_size=8192, ttt_steps=6, w_reg=0.0, w_cls=1.0, noise=0.0, loss_per="position",
                           draftable_only=True), HeadConf(layers=1, features="fused", block="eagle3")),
}


def padded_outputs(head, feats, tokens, positions, lengths, steps):
    """The batch-wide forward over padding too (what training ran before unpadding)."""
    return objective_mod.ttt_outputs(head, feats, tokens, positions, steps)


def timed_step(head, opt, batch, cfg, obj, autocast: bool, padded: bool) -> tuple[float, float]:
    """(seconds, loss) of one forward + backward + optimizer step."""
    unpadded = objective_mod.unpadded_outputs
    objective_mod.unpadded_outputs = padded_outputs if padded else unpadded
    try:
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            result = objective_mod.losses(head, batch, 0.0, obj)
        result["loss"].backward()
        opt.step()
        opt.zero_grad()
        return time.perf_counter() - start, float(result["loss"].detach())
    finally:
        objective_mod.unpadded_outputs = unpadded


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--features", default=str(cache_root() / "features" / "smollm2-135m" / "heldout"),
                    help="a feature directory made with featurize.features=fused (default: the recipe's held-out split)")
    ap.add_argument("--blocks", default="eagle,eagle3")
    ap.add_argument("--rounds", type=int, default=2, help="passes over the directory's micro batches")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    for name in args.blocks.split(","):
        if name not in SETTINGS:
            raise SystemExit(f"unknown block {name!r}: expected one of {', '.join(SETTINGS)}")
    if not Path(args.features, "manifest.json").exists():
        raise SystemExit(f"{args.features!r} is no feature directory (no manifest.json): featurize first, or pass "
                         "--features")
    target = load_target("smollm2-135m", dtype="float32", device="cpu")
    samples = read_samples(args.features, aux=True)
    autocast = resolve_dtype("auto", torch.device("cpu")) == torch.bfloat16
    print(f"machine: {cpu().label}, {args.threads} threads; float32 weights, bfloat16 autocast: {autocast}; "
          f"{len(samples)} conversations of {args.features}")
    for name in args.blocks.split(","):
        cfg, shape = SETTINGS[name]
        config = build_head_config(target, cfg, shape)
        obj = objective(cfg, 1024)
        torch.manual_seed(0)
        heads = {}
        for side in ("padded", "unpadded"):  # one head per side, so each trains on its own updates
            heads[side] = DraftHead(config, target)
            heads[side].set_draft_vocab(objective_mod.frequent_tokens(samples, cfg.draft_vocab_size))
            if shape.block == "eagle3":
                heads[side].start_from_target()
            heads[side].load_state_dict(heads["padded"].state_dict())
        opts = {side: torch.optim.AdamW([p for p in h.parameters() if p.requires_grad], lr=1e-4)
                for side, h in heads.items()}
        seconds, tokens, real, padded_size, diff = {"padded": 0.0, "unpadded": 0.0}, 0.0, 0, 0, 0.0
        batches = micro_batches(len(samples), cfg, 0, 0, 1)
        warm = objective_mod.collate([samples[i] for i in batches[0]], torch.float32, "cpu", config.fused)
        for side in heads:
            timed_step(heads[side], opts[side], warm, cfg, obj, autocast, side == "padded")
        for round_ in range(args.rounds):
            for j, ids in enumerate(batches):
                batch = objective_mod.collate([samples[i] for i in ids], torch.float32, "cpu", config.fused)
                order = ("padded", "unpadded") if (round_ + j) % 2 == 0 else ("unpadded", "padded")
                loss = {}
                for side in order:
                    dt, loss[side] = timed_step(heads[side], opts[side], batch, cfg, obj, autocast, side == "padded")
                    seconds[side] += dt
                diff = max(diff, abs(loss["padded"] - loss["unpadded"]) / max(abs(loss["padded"]), 1e-9))
                tokens += float((batch.loss_mask[:, 2:] > 0).sum())
                real += int(batch.lengths.sum())
                padded_size += batch.input_ids.numel()
        rate = {side: tokens / s for side, s in seconds.items()}
        print(f"{name}: {len(batches) * args.rounds} micro batches, real tokens {real / padded_size:.0%} of the "
              f"padded batches; loss tokens/s padded {rate['padded']:.0f}, unpadded {rate['unpadded']:.0f}: "
              f"{rate['unpadded'] / rate['padded']:.2f}x; largest relative loss difference {diff:.1e}")


if __name__ == "__main__":
    main()
