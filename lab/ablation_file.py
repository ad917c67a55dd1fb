"""The committed ablation result file: `docs/results/data/ablation/<spec>.csv`, one line per `make ablate-head` row.

`make ablate-head` merges every finished row into it: a row measured again replaces its line, rows it did not run
keep theirs (rows trained in other sessions or on other machines stay), and lines follow the spec's row order, rows
no longer in the spec last. `make results-docs` renders docs/training.md's ablation table from it, and `make
reproduce` reads its EAGLE-3 rows from it; when it changes, ablate-head also redraws `plot_path`'s τ-against-data
plot from all of the file's rows. Read and merged by lab.result_store as kind ABLATION. Columns (COLUMNS, the fields
of AblationLine; an empty cell is a figure not measured):

- row, loss_tokens (training loss tokens), epochs, top1 (held-out top-1), alpha_0..alpha_6 (simulated chain
  acceptance on the held-out split), tau (EAGLE-2, fixed tree, MT-bench first turns), tau_heldout (the same on the
  recipe's held-out first turns), speedup (EAGLE-2 tok/s over vanilla's, the defaults, one run), speed_cpu (where
  that ran), train_min (training wall time);
- trained_on: the machine the head trained on (its card's `machine`); commit: the checkout that wrote the line.
"""
from __future__ import annotations

import csv
import io
from dataclasses import dataclass, fields
from pathlib import Path

from lab.result_store import DATA_DIR, Kind

ABLATION_DIR = DATA_DIR / "ablation"


@dataclass(frozen=True)
class AblationLine:
    """One row's line of the file (the module docstring); None is an empty cell."""

    row: str
    loss_tokens: int | None
    epochs: int | None
    top1: float | None
    alpha_0: float | None
    alpha_1: float | None
    alpha_2: float | None
    alpha_3: float | None
    alpha_4: float | None
    alpha_5: float | None
    alpha_6: float | None
    tau: float | None
    tau_heldout: float | None
    speedup: float | None
    speed_cpu: str | None
    train_min: float | None
    trained_on: str | None
    commit: str | None


COLUMNS = [f.name for f in fields(AblationLine)]
TYPES = {f.name: f.type.split(" | ")[0] for f in fields(AblationLine)}
FIGURES = COLUMNS[1:-2]
ALPHAS = sum(c.startswith("alpha_") for c in COLUMNS)  # held-out α positions (eagle_train.training.train.ALPHA_STEPS)


def ablation_path(root: str | Path, spec: str) -> Path:
    """Where spec `spec`'s ablation file lives under the checkout `root`."""
    return Path(root) / ABLATION_DIR / f"{spec}.csv"


def plot_path(root: str | Path, spec: str) -> Path:
    """Where `make ablate-head` puts spec `spec`'s τ-against-data plot of the file's rows, for docs/training.md."""
    return Path(root) / DATA_DIR.parent / f"ablation-{spec}-tau-vs-tokens.png"


def full_lines(measured: list[dict]) -> dict[str, dict]:
    """Measured lines (dicts with some of COLUMNS' keys, `row` among them) by row, every column present (None when
    not given): records for lab.result_store.merge."""
    return {line["row"]: {c: line.get(c) for c in COLUMNS} for line in measured}


def _value(column: str, text: str):
    if text == "":
        return None
    kind = TYPES[column]
    return text if kind == "str" else int(float(text)) if kind == "int" else float(text)


def _decode(text: str) -> dict[str, dict]:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    if reader.fieldnames != COLUMNS:
        raise ValueError(f"columns {reader.fieldnames}")
    return {line["row"]: {c: _value(c, line[c]) for c in COLUMNS} for line in reader}


def _cell(value) -> str:
    if value is None:
        return ""
    return f"{value:.4g}" if isinstance(value, float) and not value.is_integer() else str(value)


def _encode(lines: dict[str, dict]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for line in lines.values():
        writer.writerow([_cell(line[c]) for c in COLUMNS])
    return out.getvalue()


ABLATION = Kind(f"columns {COLUMNS} (numbers in {', '.join(c for c in COLUMNS if TYPES[c] != 'str')})",
                _decode, _encode, AblationLine, ignored=("commit",))
