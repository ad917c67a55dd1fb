"""Aggregate a sweep: `python -m eval.sweep sweep_dir=results/<sweep>` (conf/command/sweep.yaml; make sweep runs it
after the Hydra multirun).

Each job directory under the sweep holds records.jsonl (or failed.txt); its name is Hydra's override_dirname
(`infer.depth=4,infer.top_k=8,...`). The `baseline` directory holds the vanilla records that speedups divide by.
Writes sweep.md, sweep.csv and heat-maps of speedup and τ, marking the best setting; a failed or empty job is a
row with its error, never a reason to drop the others. Jobs run in throughput mode (throughput.jsonl, e.g. over
infer.batch_token_budget) give one point per batch size, with speedup against vanilla at that batch size.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from eagle_infer.entry.cli_support import one_line_errors
from eagle_infer.errors import EagleError
from eagle_train.plumbing.command_line import command_settings

from . import throughput
from eagle_train.plumbing.markdown import table
from .metrics import summarize
from .records import read_records

BASELINE = "baseline"


@dataclass
class SweepPoint:
    job: str
    settings: dict[str, str]
    tok_s: float | None = None
    speedup: float | None = None
    tau: float | None = None
    questions: int = 0
    error: str = ""


def parse_job_name(name: str) -> dict[str, str]:
    """'infer.depth=4,infer.top_k=8' -> {'depth': '4', 'top_k': '8'}."""
    out = {}
    for part in name.split(","):
        if "=" in part:
            key, value = part.split("=", 1)
            out[key.split(".")[-1]] = value
    return out


def collect(sweep_dir: Path, method: str = "eagle2") -> list[SweepPoint]:
    if not sweep_dir.is_dir():
        raise EagleError(f"sweep directory {str(sweep_dir)!r} does not exist")
    base_path = sweep_dir / BASELINE / "records.jsonl"
    baseline = read_records(base_path) if base_path.exists() else []
    points = []
    for job in sorted(p for p in sweep_dir.iterdir() if p.is_dir() and p.name != BASELINE):
        point = SweepPoint(job.name, parse_job_name(job.name))
        records_path = job / "records.jsonl"
        if (job / "failed.txt").exists():
            point.error = (job / "failed.txt").read_text().splitlines()[0]
        elif (job / throughput.FILE).exists():
            rows = [r for r in throughput.rows(read_records(job / throughput.FILE)) if r.method == method]
            points += [SweepPoint(job.name, {**point.settings, "batch": str(r.batch_size)}, r.tok_s, r.speedup, r.tau,
                                  r.questions) for r in rows]
            if rows:
                continue
            point.error = f"no {method} points in {throughput.FILE}"
        elif not records_path.exists():
            point.error = "no records (interrupted before the first answer?)"
        else:
            try:
                mine = [r for r in read_records(records_path) if r["method"] == method]
                row = next(r for r in summarize(baseline + mine) if r.benchmark == "all" and r.method == method)
                point.tok_s, point.speedup, point.tau, point.questions = row.tok_s, row.speedup_vs_vanilla, row.tau, row.questions
            except (EagleError, StopIteration, KeyError, ValueError) as err:
                point.error = f"unreadable records: {err}"
        points.append(point)
    if not points:
        raise EagleError(f"sweep directory {str(sweep_dir)!r} has no job directories")
    return points


def write(points: list[SweepPoint], sweep_dir: Path) -> str:
    keys = sorted({k for p in points for k in p.settings})
    ok = [p for p in points if p.tok_s is not None]
    best = max(ok, key=lambda p: p.tok_s) if ok else None
    header = keys + ["questions", "tok_s", "speedup", "tau", "error"]
    with open(sweep_dir / "sweep.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        for p in points:
            w.writerow([p.settings.get(k, "") for k in keys] + [p.questions, p.tok_s, p.speedup, p.tau, p.error])

    def fmt(v, pattern):
        return "—" if v is None else pattern.format(v)

    md = table(header[:-1] + ["note"], [
        [p.settings.get(k, "") for k in keys] + [str(p.questions), fmt(p.tok_s, "{:.1f}"), fmt(p.speedup, "{:.2f}x"),
                                                 fmt(p.tau, "{:.2f}"), "**best**" if p is best else p.error]
        for p in points
    ])
    auto = [p for p in ok if "auto" in p.settings.values()]
    fixed = [p for p in ok if p not in auto]
    if auto and fixed:
        top = max(fixed, key=lambda p: p.tok_s)
        md += "".join(f"\nauto ({p.job}): {p.tok_s:.1f} tok/s = {p.tok_s / top.tok_s:.2f}x the best fixed setting "
                      f"({top.job}, {top.tok_s:.1f} tok/s)\n" for p in auto)
    (sweep_dir / "sweep.md").write_text(md)
    if ok and len(keys) >= 2:
        heatmaps(ok, keys, best, sweep_dir)
    return md


def heatmaps(points: list[SweepPoint], keys: list[str], best: SweepPoint, sweep_dir: Path) -> None:
    """Speedup and τ over the two swept keys with the most values (best over any other key), best marked."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    keys = sorted(keys, key=lambda k: -len({p.settings.get(k) for p in points}))[:2]
    xs = sorted({p.settings.get(keys[0], "") for p in points}, key=_num)
    ys = sorted({p.settings.get(keys[1], "") for p in points}, key=_num)
    for metric in ("speedup", "tau"):
        grid = [[None for _ in xs] for _ in ys]
        for p in points:
            i, j = ys.index(p.settings.get(keys[1], "")), xs.index(p.settings.get(keys[0], ""))
            value = getattr(p, metric)
            if value is not None and (grid[i][j] is None or value > grid[i][j]):
                grid[i][j] = value
        fig = Figure(figsize=(1.2 * len(xs) + 2, 0.8 * len(ys) + 1.8))
        ax = fig.add_subplot()
        image = ax.imshow([[float("nan") if v is None else v for v in row] for row in grid], cmap="viridis", aspect="auto")
        fig.colorbar(image, ax=ax, label=metric)
        ax.set_xticks(range(len(xs)), xs)
        ax.set_yticks(range(len(ys)), ys)
        ax.set_xlabel(keys[0])
        ax.set_ylabel(keys[1])
        for i, row in enumerate(grid):
            for j, v in enumerate(row):
                if v is not None:
                    ax.text(j, i, f"{v:.2f}", ha="center", va="center", color="white", fontsize=8)
        bi, bj = ys.index(best.settings.get(keys[1], "")), xs.index(best.settings.get(keys[0], ""))
        ax.add_patch(Rectangle((bj - 0.5, bi - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=2))
        ax.set_title(f"eagle2 {metric} (best over other keys; red = fastest setting)")
        fig.tight_layout()
        fig.savefig(sweep_dir / f"sweep_{metric}.png", dpi=110)


def _num(value: str):
    try:
        return float(value)
    except ValueError:
        return float("inf")


@dataclass
class SweepSettings:
    sweep_dir: str


@one_line_errors
def main(argv: list[str] | None = None) -> None:
    sweep_dir = Path(command_settings("sweep", SweepSettings, argv).sweep_dir)
    print(write(collect(sweep_dir), sweep_dir))


if __name__ == "__main__":
    main()
