"""Training curves of `make ablate-head` rows: the committed file `docs/results/data/ablation/<spec>-curves.json`
and the plot drawn from it, `docs/results/ablation-<spec>-curves.png`.

A row's training directory holds `train.jsonl` (one line per optimizer step: `step`, `cls_loss`, ...) and
`eval.jsonl` (one line per held-out evaluation: `heldout/top1`, `heldout/alpha_k`, and for training-time-test rows
`heldout/top1_k`, the head's top-1 at unrolled step k). Training cuts both logs back to its checkpoint when a run
resumes, so a step appears once; should one appear twice, the later line wins. `row_curves` keeps what the plot
needs:

- `steps`: the run's optimizer steps;
- `eval`: [{step, top1, top1_steps: [top-1 at unrolled step 0..K] (K = 0 without the test), alpha: [0-α..6-α]}];
- `cls_loss`: [[step, mean step-0 cross-entropy against the target's distribution over the window ending there]],
  WINDOWS windows. Each objective divides it its own way (per loss token; per batch position for EAGLE-3's
  reference, `train.loss_per=position`), so compare its shape across rows, not its level.

The file is read and merged by lab.result_store as kind CURVES (each row a RowCurves).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from lab.ablation_file import ABLATION_DIR, ALPHAS
from lab.result_store import DATA_DIR, Kind

WINDOWS = 100  # training-loss points kept per row


def curves_path(root: str | Path, spec: str) -> Path:
    """Where spec `spec`'s curve file lives under the checkout `root`."""
    return Path(root) / ABLATION_DIR / f"{spec}-curves.json"


def curves_plot_path(root: str | Path, spec: str) -> Path:
    """Where the plot of spec `spec`'s curve file goes, for docs/training.md."""
    return Path(root) / DATA_DIR.parent / f"ablation-{spec}-curves.png"


def _by_step(path: Path) -> list[dict]:
    """The file's JSON lines, one per step (the last line logged for a step), in step order."""
    lines: dict[int, dict] = {}
    for text in path.read_text().splitlines():
        if text.strip():
            line = json.loads(text)
            lines[int(line["step"])] = line
    return [lines[s] for s in sorted(lines)]


def _number(value) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else round(float(value), 5)


def row_curves(row_dir: Path) -> dict | None:
    """The curves of the run in `row_dir` (see the module docstring), or None when it logged no training step."""
    train_log, eval_log = row_dir / "train.jsonl", row_dir / "eval.jsonl"
    train = _by_step(train_log) if train_log.exists() else []
    if not train:
        return None
    evals = []
    for line in _by_step(eval_log) if eval_log.exists() else []:
        unrolled = [line.get("heldout/top1")]
        while f"heldout/top1_{len(unrolled)}" in line:
            unrolled.append(line[f"heldout/top1_{len(unrolled)}"])
        evals.append({"step": line["step"], "top1": _number(line.get("heldout/top1")),
                      "top1_steps": [_number(v) for v in unrolled],
                      "alpha": [_number(line.get(f"heldout/alpha_{k}")) for k in range(ALPHAS)]})
    width = max(1, math.ceil(len(train) / WINDOWS))
    loss = []
    for start in range(0, len(train), width):
        window = [t["cls_loss"] for t in train[start:start + width] if "cls_loss" in t]
        if window:
            loss.append([train[min(start + width, len(train)) - 1]["step"], round(sum(window) / len(window), 5)])
    return {"steps": train[-1]["step"], "eval": evals, "cls_loss": loss}


@dataclass(frozen=True)
class RowCurves:
    """A row's curves as row_curves gives them (the module docstring)."""

    steps: int
    eval: list
    cls_loss: list


def _decode(text: str) -> dict[str, dict]:
    rows = json.loads(text)
    if not isinstance(rows, dict):
        raise ValueError(f"holds {type(rows).__name__}")
    return rows


CURVES = Kind("a JSON object of rows' curves, each {steps, eval, cls_loss}", _decode,
              lambda rows: json.dumps(rows, indent=1) + "\n", RowCurves)


def plot_curves(curves: dict[str, dict], rows: list[str], path: Path) -> Path | None:
    """Three panels for the `rows` that have curves: held-out top-1 against the share of training done; the last
    evaluation's held-out top-1 at each unrolled step (training-time-test rows) and simulated n-α (every row) against
    the chain position; the first-step training loss against the share of training done. None when no
    row has curves."""
    shown = [r for r in rows if r in curves and curves[r]["eval"]]
    if not shown:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top1, chain, loss) = plt.subplots(1, 3, figsize=(15, 4.2))
    for name in shown:
        row = curves[name]
        evals, last = row["eval"], row["eval"][-1]
        line = top1.plot([e["step"] / row["steps"] for e in evals], [e["top1"] for e in evals], marker="o",
                         label=name)[0]
        colour = line.get_color()
        alpha = [(k, a) for k, a in enumerate(last["alpha"]) if a is not None]
        chain.plot([k for k, _ in alpha], [a for _, a in alpha], marker="o", color=colour, label=f"{name}: n-α")
        if len(last["top1_steps"]) > 1:
            chain.plot(range(len(last["top1_steps"])), last["top1_steps"], marker="x", linestyle="--", color=colour,
                       label=f"{name}: top-1 at unrolled step")
        loss.plot([s / row["steps"] for s, _ in row["cls_loss"]], [v for _, v in row["cls_loss"]], color=colour)
    top1.set(xlabel="share of training steps done", ylabel="held-out top-1 (first draft token)")
    chain.set(xlabel="chain position / unrolled step", ylabel="held-out, end of training")
    loss.set(xlabel="share of training steps done", ylabel="training loss, first step (each objective's own)")
    top1.legend(fontsize=7)
    chain.legend(fontsize=6)
    for ax in (top1, chain, loss):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
