"""Markdown tables: the one helper every report (eval tables, throughput, sweeps, ablations, bench-engine) uses."""
from __future__ import annotations


def table(header, rows) -> str:
    """A Markdown table of `header` (cells) and `rows` (lists of cells, str() of each), ending with a newline."""
    line = lambda cells: "| " + " | ".join(str(c) for c in cells) + " |"  # noqa: E731
    return "\n".join([line(header), line(["---"] * len(header))] + [line(r) for r in rows]) + "\n"
