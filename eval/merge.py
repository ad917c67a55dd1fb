"""Merge runs into one table: `python -m eval.merge out=results/OUT 'runs=[results/RUN_A,results/RUN_B]'`
(conf/command/merge.yaml).

For runs of the same model and settings split by benchmark (e.g. run side by side on two machines or cores):
their records are concatenated into OUT/records.jsonl (a (benchmark, method, question) present twice is an
error), then OUT gets table.md, table.csv, cycles.md, calibration.md and the plots, exactly as a single run would.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from eagle_infer.entry.cli_support import one_line_errors
from eagle_infer.errors import EagleError
from eagle_train.plumbing.command_line import command_settings

from .metrics import cycle_split, summarize
from .records import read_records, record_key
from .report import plot_all, write_calibration, write_cycles, write_table


@dataclass
class MergeSettings:
    out: str
    runs: list[str]


def merge(out: Path, runs: list[Path]) -> str:
    records, seen = [], set()
    for run in runs:
        path = run / "records.jsonl"
        if not path.exists():
            raise EagleError(f"run {str(run)!r} has no records.jsonl")
        for record in read_records(path):
            key = record_key(record)
            if key in seen:
                raise EagleError(f"record {key} appears in more than one run: merge runs of disjoint benchmarks")
            seen.add(key)
            records.append(record)
    out.mkdir(parents=True, exist_ok=True)
    (out / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    rows = summarize(records)
    markdown = write_table(rows, out)
    write_cycles(cycle_split(records), out)
    write_calibration(records, out)
    plot_all(records, rows, out)
    return markdown


@one_line_errors
def main(argv: list[str] | None = None) -> None:
    conf = command_settings("merge", MergeSettings, argv)
    if not conf.runs:
        raise EagleError("runs=[] names no run; expected runs=[results/RUN_A,results/RUN_B,...]")
    print(merge(Path(conf.out), [Path(run) for run in conf.runs]))


if __name__ == "__main__":
    main()
