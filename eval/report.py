"""Results output: table.csv / table.md, cycles.md, calibration.md, PNG plots (matplotlib Agg, no pyplot state) and
an optional wandb log."""
from __future__ import annotations

import csv
import logging
import os
from dataclasses import astuple, fields
from pathlib import Path

from eagle_infer.errors import EagleError
from eagle_train.plumbing.markdown import table
from eval.metrics import ALL, ALPHA_POSITIONS, ROW_COLUMNS, CycleRow, Row, accept_length_hist, calibration, summarize

WANDB_MODES = ("offline", "online", "disabled")
log = logging.getLogger(__name__)
_MD_COLUMNS = ("benchmark", "method", "speedup", "vs HF", "τ", "tok/s", "identical", "from lookup")


HALF_PRECISION_NOTE = (
    "identical = answers token-for-token equal to vanilla's. In {dtype}, verifying many tokens in one forward rounds "
    "differently from one-token forwards, so where the target's top two logits are within rounding the argmax can flip "
    "and the answers diverge; greedy EAGLE output equals vanilla's exactly in float32 (make demo checks it)."
)


def category_table(records: list[dict]) -> str:
    """Speedup, τ and tok/s per (benchmark, category, method), for benchmarks whose questions span several
    categories (MT-bench's eight); "" when none does."""
    spans: dict[str, set] = {}
    for r in records:
        spans.setdefault(r["benchmark"], set()).add(r.get("category") or "")
    relabelled = [{**r, "benchmark": f"{r['benchmark']} / {r['category']}"} for r in records
                  if len(spans[r["benchmark"]]) > 1]
    rows = [row for row in summarize(relabelled) if row.benchmark != ALL]
    if not rows:
        return ""
    return "By category:\n\n" + table(["benchmark / category", "method", "speedup", "τ", "tok/s"], [
        [row.benchmark, row.method, _fmt(row.speedup_vs_vanilla, "{:.2f}x"), _fmt(row.tau, "{:.2f}"),
         _fmt(row.tok_s, "{:.1f}")] for row in rows])


def write_table(rows: list[Row], out_dir: str | os.PathLike, dtype: str | None = None, extra: str = "") -> str:
    """Write `table.csv` (header = `ROW_COLUMNS`, None as empty) and `table.md`, with `extra` (Markdown, e.g. the
    category table) after the table; return the Markdown. With a 16-bit float dtype the Markdown ends with a note
    saying why its answers can differ from vanilla's."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "table.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(ROW_COLUMNS)
        writer.writerows(astuple(row) for row in rows)
    markdown = table(_MD_COLUMNS, [
        [row.benchmark, row.method, _fmt(row.speedup_vs_vanilla, "{:.2f}x"), _fmt(row.speedup_vs_hf, "{:.2f}x"),
         _fmt(row.tau, "{:.2f}"), _fmt(row.tok_s, "{:.1f}"), _fmt(row.identical_share, "{:.0%}"),
         _fmt(row.lookup_share, "{:.0%}")]
        for row in rows
    ])
    if extra:
        markdown += "\n" + extra
    if dtype in ("bfloat16", "float16"):
        markdown += "\n" + HALF_PRECISION_NOTE.format(dtype=dtype) + "\n"
    (out / "table.md").write_text(markdown, encoding="utf-8")
    return markdown


_CYCLE_COLUMNS = ("benchmark", "method", "cycles", "draft ms/cycle", "verify ms/cycle", "tree nodes", "accepted/cycle",
                  "copied accepted/cycle", "ms/head forward", "ms/token")


def write_cycles(rows: list[CycleRow], out_dir: str | os.PathLike) -> str:
    """Write `cycles.md`, where each method's time goes per cycle (draft time includes the head's pass over the
    tokens accepted in the previous cycle; transformers' peers keep no cycles, only their ms/token); return it."""
    markdown = table(_CYCLE_COLUMNS, [
        [row.benchmark, row.method, str(row.cycles) if row.cycles else "—", _fmt(row.draft_ms, "{:.1f}"),
         _fmt(row.verify_ms, "{:.1f}"), _fmt(row.tree_nodes, "{:.1f}"), _fmt(row.accepted, "{:.2f}"),
         _fmt(row.copied_accepted, "{:.2f}"), _fmt(row.ms_per_head_forward, "{:.2f}"), _fmt(row.ms_per_token, "{:.1f}")]
        for row in rows
    ])
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "cycles.md").write_text(markdown, encoding="utf-8")
    return markdown


def write_calibration(records: list[dict], out_dir: str | os.PathLike, bins: int = 10) -> str:
    """Write `calibration.md`: per drafting method, its tested draft nodes in `bins` confidence buckets, their mean
    confidence beside the share accepted (what the tree chosen per cycle takes path values for); return it."""
    rows = []
    for method in dict.fromkeys(r["method"] for r in records):
        for b in calibration([r for r in records if r["method"] == method], bins):
            if b.n:
                rows.append([method, f"{b.low:.1f}–{b.high:.1f}", str(b.n), f"{b.confidence:.3f}", f"{b.rate:.3f}",
                             f"{b.rate - b.confidence:+.3f}"])
    columns = ("method", "confidence", "draft nodes", "mean confidence", "accepted share", "accepted − confidence")
    markdown = table(columns, rows)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "calibration.md").write_text(markdown, encoding="utf-8")
    return markdown


def plot_all(records: list[dict], rows: list[Row], out_dir: str | os.PathLike) -> list[str]:
    """Write the PNG plots (speedup, τ, accepted lengths, per-position acceptance, calibration); return paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    methods = list(dict.fromkeys(row.method for row in rows))
    benchmarks = list(dict.fromkeys(row.benchmark for row in rows))
    by_key = {(row.benchmark, row.method): row for row in rows}

    def per_benchmark(column: str) -> dict[str, list[float | None]]:
        return {m: [_get(by_key.get((b, m)), column) for b in benchmarks] for m in methods}

    overall = {m: by_key[(ALL, m)] for m in methods if (ALL, m) in by_key}
    hist = accept_length_hist(records)
    longest = max(map(len, hist.values()), default=0)
    paths = [
        _bars(out / "speedup.png", "benchmark", "speedup vs vanilla", benchmarks, per_benchmark("speedup_vs_vanilla")),
        _bars(out / "tau.png", "benchmark", "τ (tokens per target forward)", benchmarks, per_benchmark("tau")),
        _bars(
            out / "accept_length.png",
            "draft tokens accepted in a cycle",
            "cycles",
            [str(k) for k in range(longest)],
            {m: counts + [0] * (longest - len(counts)) for m, counts in hist.items()},
        ),
        _bars(
            out / "alpha.png",
            "draft position n (all benchmarks)",
            "acceptance rate n-α",
            [f"{n}-α" for n in range(ALPHA_POSITIONS)],
            {m: [getattr(row, f"alpha_{n}") for n in range(ALPHA_POSITIONS)] for m, row in overall.items()},
        ),
        _calibration_plot(out / "calibration.png", records, methods),
    ]
    return [str(path) for path in paths]


def log_wandb(
    rows: list, plot_paths: list[str], run_name: str, config: dict, mode: str = "offline", project: str = "eagle"
) -> None:
    """Log the table (rows: dataclasses of one type, e.g. `Row`) and plots as one wandb run; `mode` is one of
    `WANDB_MODES` (offline writes under WANDB_DIR)."""
    if mode not in WANDB_MODES:
        raise EagleError(f"wandb mode {mode!r} is not one of {', '.join(WANDB_MODES)}")
    if mode == "disabled":
        return
    os.environ.setdefault("WANDB_SILENT", "true")
    try:
        import wandb  # optional (the `track` extra); a slow import, only needed when logging
    except ImportError:
        log.warning("wandb.mode=%s: wandb is not installed (pip install 'eagle-toolkit[track]'); not logging", mode)
        return

    run = wandb.init(project=project, name=run_name, config=config, mode=mode)
    try:
        columns = [f.name for f in fields(rows[0])] if rows else list(ROW_COLUMNS)
        table = wandb.Table(columns=columns, data=[list(astuple(row)) for row in rows])
        run.log({"results": table, **{Path(path).stem: wandb.Image(path) for path in plot_paths}})
    finally:
        run.finish()


def _fmt(value: float | None, pattern: str) -> str:
    return "—" if value is None else pattern.format(value)


def _get(row: Row | None, column: str) -> float | None:
    return None if row is None else getattr(row, column)


def _bars(path: Path, xlabel: str, ylabel: str, groups: list[str], series: dict[str, list[float | None]]) -> Path:
    """Grouped bar chart: one group per x label, one bar per series (None drawn as no bar)."""
    fig, ax = _figure()
    width = 0.8 / max(len(series), 1)
    for i, (name, values) in enumerate(series.items()):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        ax.bar(xs, [float("nan") if v is None else v for v in values], width, label=name)
    ax.set_xticks(range(len(groups)), groups)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    return _save(fig, ax, path)


def line_plot(path: Path, xlabel: str, ylabel: str, xs: list[float], series: dict[str, list[float | None]]) -> Path:
    """One line per series over shared x values (None drawn as a gap)."""
    fig, ax = _figure()
    for name, values in series.items():
        ax.plot(xs, [float("nan") if v is None else v for v in values], marker="o", label=name)
    ax.set_xticks(xs, [str(x) for x in xs])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    return _save(fig, ax, path)


def _calibration_plot(path: Path, records: list[dict], methods: list[str]) -> Path:
    """Observed acceptance rate per draft-confidence bucket, per method, against the diagonal."""
    fig, ax = _figure()
    ax.plot([0, 1], [0, 1], linestyle="--", color="grey", label="calibrated")
    for method in methods:
        buckets = [b for b in calibration([r for r in records if r["method"] == method]) if b.rate is not None]
        if buckets:
            ax.plot([(b.low + b.high) / 2 for b in buckets], [b.rate for b in buckets], marker="o", label=method)
    ax.set_xlabel("draft confidence")
    ax.set_ylabel("observed acceptance")
    return _save(fig, ax, path)


def _figure():
    from matplotlib.figure import Figure  # renders with the Agg canvas; no global pyplot backend state

    fig = Figure(figsize=(8, 4.5))
    return fig, fig.add_subplot()


def _save(fig, ax, path: Path) -> Path:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path
