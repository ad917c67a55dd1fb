"""Training-step speed, side by side in one run: the head's forward and backward over right-padded batches
("padded", what training runs on a GPU) against the rows' real tokens packed end to end ("unpadded", what it runs
on a CPU; eagle_train.training.objective.Objective.unpadded); for EAGLE-3's block (draftable_only) also with the target's
argmax computed once per conversation ("stored", what training does) instead of per batch; with --compile also
what training runs on this device (packed on a CPU, padded on a GPU) with train.compile ("compiled": the head's
layers and each step's loss through torch.compile, warmed up before timing; its warm-up seconds are printed).

Every side computes the full training loss (eagle_train.training.objective.losses) and takes an optimizer step on the same
micro batches of 4 held-out conversations in training's order, under training's bfloat16 autocast where the CPU has
native bfloat16 matmuls (always on a GPU); the padded side runs ttt_outputs over the padded batch instead of
packed_outputs (Objective.unpadded). Sides take turns going first. Prints the machine, each side's loss tokens/s and ratio to
padded, the aten operators one step dispatches (torch.profiler), the one-off seconds of the stored argmax, and the
largest relative difference of the losses (rounding only: every attention is causal). On a GPU (--device cuda, the
default where CUDA is) it decides what training's default should be there: training runs packed on a CPU and
batch-wide elsewhere.

usage: python scripts/bench_train_step.py [--features DIR] [--blocks eagle,ttt3,eagle3] [--rounds 2] [--threads 2]
       [--conversations N] [--device cpu|cuda] [--compile]
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # this checkout's packages, as `python scripts/...` runs it

import eagle_train.training.objective as objective_mod
from eagle_infer.platform import cache_root, cpu, resolve_dtype  # noqa: E402
from eagle_infer.models.target import load_target  # noqa: E402
from eagle_train.features.shards import read_samples
from eagle_train.training.objective import compile_layers
from eagle_train.training.train import build_head_config, micro_batches, new_head, objective
from lab.ablate_head import row_settings  # noqa: E402

# Each --blocks name times the settings of one row of the ablation (conf/ablate/smollm2-135m.yaml, composed as
# `make ablate-head` trains it): the two-layer EAGLE-1 block, the same with the training-time test K = 3, and
# EAGLE-3's block with K = 7.
BLOCK_ROWS = {"eagle": "layers2-all-cosine-2400k", "ttt3": "ttt3-layers2-2400k", "eagle3": "eagle3-block-k7-2400k"}


def timed_step(head, opt, batch, obj, autocast: bool, padded: bool) -> tuple[float, float]:
    """(seconds, loss) of one forward + backward + optimizer step, the head over the padded batch or packed."""
    device = batch.input_ids.device
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    start = time.perf_counter()
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
        result = objective_mod.losses(head, batch, 0.0, dataclasses.replace(obj, unpadded=not padded))
    result["loss"].backward()
    opt.step()
    opt.zero_grad()
    loss = float(result["loss"].detach())  # waits for the step
    sync()
    return time.perf_counter() - start, loss


def ops_per_step(head, opt, batch, obj, autocast: bool, padded: bool) -> int:
    """Aten operators one training step dispatches (torch.profiler, one step): where a step is bound by the host's
    dispatch, as a small head's is on a GPU, its time follows this count rather than its FLOPs."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        timed_step(head, opt, batch, obj, autocast, padded)
    return sum(e.count for e in prof.key_averages() if e.key.startswith("aten::"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--features", default=str(cache_root() / "features" / "smollm2-135m" / "heldout"),
                    help="a feature directory made with featurize.features=fused (default: the recipe's held-out split)")
    ap.add_argument("--blocks", default="eagle,ttt3,eagle3")
    ap.add_argument("--rounds", type=int, default=2, help="passes over the directory's micro batches")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--conversations", type=int, default=None, help="the directory's first N only (default: all)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cpu", "cuda"])
    ap.add_argument("--compile", action="store_true", help="also time training with train.compile")
    args = ap.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: this machine has no CUDA device; expected --device cpu")
    torch.set_num_threads(args.threads)
    for name in args.blocks.split(","):
        if name not in BLOCK_ROWS:
            raise SystemExit(f"unknown block {name!r}: expected one of {', '.join(BLOCK_ROWS)}")
    if not Path(args.features, "manifest.json").exists():
        raise SystemExit(f"{args.features!r} is no feature directory (no manifest.json): featurize first, or pass "
                         "--features")
    target = load_target("smollm2-135m", dtype="float32", device=args.device)
    samples = read_samples(args.features, aux=True)[: args.conversations]
    if len(samples) < 4:
        raise SystemExit(f"{len(samples)} conversations cannot fill a micro batch of 4: expected --conversations >= 4")
    autocast = resolve_dtype("auto", device) == torch.bfloat16
    machine = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{cpu().label}, {args.threads} threads"
    print(f"machine: {machine}; float32 weights, bfloat16 autocast: {autocast}; "
          f"{len(samples)} conversations of {args.features}")
    for name in args.blocks.split(","):
        cfg, shape = row_settings("smollm2-135m", BLOCK_ROWS[name])
        config = build_head_config(target, cfg, shape)
        obj = objective(cfg, 1024)
        sides = ["padded", "unpadded"] + (["stored"] if cfg.draftable_only else []) + (["compiled"] if args.compile else [])
        # One head per side, equal at the start (training's seed), so each trains on its own updates.
        heads = {side: new_head(config, target, cfg, samples).to(device) for side in sides}
        if args.compile:
            compile_layers(heads["compiled"])
        opts = {side: torch.optim.AdamW([p for p in h.parameters() if p.requires_grad], lr=1e-4)
                for side, h in heads.items()}
        start = time.perf_counter()
        stored = objective_mod.with_target_top(samples, target, autocast, progress=False) if "stored" in sides else []
        argmax_s = time.perf_counter() - start
        seconds, tokens, real, padded_size, diff = dict.fromkeys(sides, 0.0), 0.0, 0, 0, 0.0
        batches = micro_batches(len(samples), cfg, 0, 0, 1)

        def batch_of(side, ids):
            reads = stored if side == "stored" or (side == "compiled" and stored) else samples
            return objective_mod.collate([reads[i] for i in ids], torch.float32, device, config.fused)

        def obj_of(side):
            return dataclasses.replace(obj, compiled=side == "compiled")

        def padded(side):  # the compiled side runs as training does on this device: packed on a CPU, else padded
            return side == "padded" or (side == "compiled" and device.type != "cpu")

        warm = {}  # seconds of each side's warm-up: two batches (compiling, the second of other row lengths)
        for side in sides:
            warm[side] = sum(timed_step(heads[side], opts[side], batch_of(side, ids), obj_of(side), autocast,
                                        padded(side))[0] for ids in batches[:2])
        ops = {side: ops_per_step(heads[side], opts[side], batch_of(side, batches[0]), obj_of(side), autocast,
                                  padded(side)) for side in sides}
        for round_ in range(args.rounds):
            for j, ids in enumerate(batches):
                turn = (round_ * len(batches) + j) % len(sides)
                loss = {}
                for side in sides[turn:] + sides[:turn]:
                    batch = batch_of(side, ids)
                    dt, loss[side] = timed_step(heads[side], opts[side], batch, obj_of(side), autocast,
                                                padded(side))
                    seconds[side] += dt
                diff = max([diff] + [abs(v - loss["padded"]) / max(abs(loss["padded"]), 1e-9) for v in loss.values()])
                tokens += float((batch.loss_mask[:, 2:] > 0).sum())
                real += int(batch.lengths.sum())
                padded_size += batch.input_ids.numel()
        rate = {side: tokens / s for side, s in seconds.items()}
        print(f"{name}: {len(batches) * args.rounds} micro batches, real tokens {real / padded_size:.0%} of the padded "
              f"batches; loss tokens/s " + ", ".join(f"{side} {rate[side]:.0f} ({rate[side] / rate['padded']:.2f}x)"
                                                    for side in sides)
              + "; aten ops per step " + ", ".join(f"{side} {ops[side]}" for side in sides)
              + (f"; stored argmax once: {argmax_s:.1f} s" if stored else "")
              + (f"; compiled warm-up {warm['compiled']:.1f} s (uncompiled sides {max(v for k, v in warm.items() if k != 'compiled'):.1f} s at most)"
                 if "compiled" in warm else "")
              + f"; largest relative loss difference {diff:.1e}")


if __name__ == "__main__":
    main()
