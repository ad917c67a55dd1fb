"""Train one recipe with the target's states offline, online and cached, one after another, and print the runs side
by side: held-out top-1, top-3 and loss, disk written, each stage's wall time (featurize; train: its loop, and the
stage with its start-up), loss tokens per second of the training loop.

    python scripts/compare_features.py                       # the demo recipe, runs/compare-<mode>/
    python scripts/compare_features.py --recipe demo --modes offline online --ngpu 1

Each mode runs `make train MODEL=<recipe>` with its own features and output directories (<out>-<mode>/), stage by
stage, keeping each finished stage's wall time in <out>-<mode>/timings.json: a rerun skips the finished stages and
resumes an interrupted one where it stopped (its time then counts from the restart). Run it alone: the times are
wall-clock.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from eagle_infer.platform import cpu  # noqa: E402
from eagle_train.features.states import MODES


def bytes_under(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def run_mode(recipe: str, mode: str, ngpu: int, out: Path, extra: list[str]) -> dict:
    """Featurize and train one mode (resuming where a previous run stopped); its timings and summary."""
    features, head = out / "features", out / "head"
    args = [f"train.features={mode}", f"data.features_dir={features}", f"train.out_dir={head}",
            "train.wandb_mode=disabled", *extra]
    timings_file = out / "timings.json"  # each stage's wall time, kept so that a rerun skips the finished stages
    timings = json.loads(timings_file.read_text()) if timings_file.exists() else {}
    for stage in ("featurize", "train"):
        if stage in timings:
            continue
        stage_cmd = ["make", "-s", "-C", str(ROOT), "-o", ".venv/.installed", "train", f"MODEL={recipe}",
                     f"NGPU={ngpu}", f"STAGES={stage}", f"ARGS={' '.join(args)}"]
        start = time.perf_counter()
        print(f"[{mode}] {stage}: {' '.join(stage_cmd)}", flush=True)
        done = subprocess.run(stage_cmd, cwd=ROOT)
        if done.returncode:
            sys.exit(f"error: {mode} {stage} exited with {done.returncode}")
        timings[stage] = time.perf_counter() - start
        timings_file.write_text(json.dumps(timings) + "\n")
    summary = json.loads((head / "summary.json").read_text())
    return {"mode": mode, "featurize_s": timings["featurize"], "train_stage_s": timings["train"],
            "train_s": summary["train_s"],
            "loss_tokens": summary["loss_tokens"], "disk_mb": bytes_under(features) / 1e6, **summary}


HELD_OUT = ("heldout/top1", "heldout/top3", "heldout/loss")


def table(rows: list[dict]) -> str:
    head = ["mode", "held-out top-1", "top-3", "loss", "featurize s", "train s", "wall s (both stages)", "loss tok/s",
            "disk MB"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["mode"], *(f"{r.get(k, float('nan')):.4f}" for k in HELD_OUT), f"{r['featurize_s']:.0f}",
                 f"{r['train_s']:.0f}", f"{r['featurize_s'] + r['train_stage_s']:.0f}",
                 f"{r['loss_tokens'] * r['epochs'] / r['train_s']:.0f}", f"{r['disk_mb']:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="demo")
    parser.add_argument("--modes", nargs="+", default=["offline", "online"], choices=MODES)
    parser.add_argument("--ngpu", type=int, default=1, help="ranks (DeepSpeed's launcher; gloo on a CPU)")
    parser.add_argument("--out", default="runs/compare", help="each mode writes <out>-<mode>/")
    parser.add_argument("extra", nargs="*", help="more recipe settings, as key=value")
    args = parser.parse_args()
    print(f"CPU: {cpu().label}; recipe {args.recipe}; {args.ngpu} rank(s); modes {', '.join(args.modes)}", flush=True)
    rows = [run_mode(args.recipe, m, args.ngpu, ROOT / f"{args.out}-{m}", args.extra) for m in args.modes]
    (ROOT / f"{args.out}.json").write_text(json.dumps(rows, indent=2) + "\n")
    print(table(rows))


if __name__ == "__main__":
    main()
