"""The committed ablation result file: `docs/results/data/ablation/<spec>.csv`, one line per `make ablate-head` row.

`make ablate-head` merges every finished row into it: a row measured again replaces its line, rows it did not run
keep theirs (rows trained in other sessions or on other machines stay), and lines follow the spec's row order, rows
no longer in the spec last. `make results-docs` renders docs/training.md's ablation table from it, and `make
reproduce` reads its EAGLE-3 rows from it; when it changes, ablate-head also redraws `plot_path`'s τ-against-data
plot from all of the file's rows. Columns (COLUMNS; an empty cell is a figure not measured):

- row, loss_tokens (training loss tokens), epochs, top1 (held-out top-1), alpha_0..alpha_6 (simulated chain
  acceptance on the held-out split), tau (EAGLE-2, fixed tree, MT-bench first turns), tau_heldout (the same on the
  recipe's held-out first turns), speedup (EAGLE-2 tok/s over vanilla's, the defaults, one run), speed_cpu (where
  that ran), train_min (training wall time);
- trained_on: the machine the head trained on (its card's `machine`); commit: the checkout that wrote the line.
"""
from __future__ import annotations

import csv
import io
from pathlib import Path

from eagle_infer.errors import EagleError
from lab.result_file import DATA_DIR

ALPHAS = 7  # held-out α positions 0..6 (eagle_train.train.ALPHA_STEPS; a test keeps them equal)
FIGURES = ["loss_tokens", "epochs", "top1", *(f"alpha_{k}" for k in range(ALPHAS)), "tau", "tau_heldout",
           "speedup", "speed_cpu", "train_min"]
COLUMNS = ["row", *FIGURES, "trained_on", "commit"]
TEXT = {"row", "speed_cpu", "trained_on", "commit"}
ABLATION_DIR = DATA_DIR / "ablation"


def ablation_path(root: str | Path, spec: str) -> Path:
    """Where spec `spec`'s ablation file lives under the checkout `root`."""
    return Path(root) / ABLATION_DIR / f"{spec}.csv"


def plot_path(root: str | Path, spec: str) -> Path:
    """Where `make ablate-head` puts spec `spec`'s τ-against-data plot of the file's rows, for docs/training.md."""
    return Path(root) / DATA_DIR.parent / f"ablation-{spec}-tau-vs-tokens.png"


def _value(column: str, text: str):
    if text == "" or column in TEXT:
        return text or None
    number = float(text)
    return int(number) if column in ("loss_tokens", "epochs") else number


def read_ablation(path: str | Path) -> dict[str, dict]:
    """The file's lines by row name, figures parsed (empty cells None); a missing file reads as no rows, a file
    with other columns is refused in one line."""
    path = Path(path)
    if not path.exists():
        return {}
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames != COLUMNS:
            raise EagleError(f"{path}: columns {reader.fieldnames}; expected {COLUMNS}")
        try:
            return {line["row"]: {c: _value(c, line[c]) for c in COLUMNS} for line in reader}
        except ValueError as err:
            raise EagleError(f"{path}: {err}; expected numbers in {', '.join(sorted(set(FIGURES) - TEXT))}") from None


def _cell(value) -> str:
    if value is None:
        return ""
    return f"{value:.4g}" if isinstance(value, float) and not value.is_integer() else str(value)


def ablation_text(lines: dict[str, dict], order: list[str]) -> str:
    """The CSV text of `lines`, in `order` first, the rest after in their own order."""
    names = [n for n in order if n in lines] + [n for n in lines if n not in order]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for name in names:
        writer.writerow([_cell(lines[name].get(c)) for c in COLUMNS])
    return out.getvalue()


def merge_ablation(path: str | Path, measured: list[dict], order: list[str]) -> bool:
    """Replace the lines of the rows in `measured` (dicts with COLUMNS' keys) whose figures or machine differ from
    the file's (an unchanged row keeps the commit that first wrote it), keep the others; returns whether the file
    changed."""
    path = Path(path)
    lines = read_ablation(path)
    same = lambda a, b: all(_cell(a.get(c)) == _cell(b.get(c)) for c in COLUMNS if c != "commit")  # noqa: E731
    for line in measured:
        if line["row"] not in lines or not same(lines[line["row"]], line):
            lines[line["row"]] = {c: line.get(c) for c in COLUMNS}
    text = ablation_text(lines, order)
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return True
