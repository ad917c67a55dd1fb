"""Throughput mode (`python -m eval.cli mode=throughput`, make throughput): output tokens/s of each method at
several batch sizes over a benchmark's first turns, like the EAGLE paper's batch-size table.

For every (benchmark, method, batch size) all questions go to one generate_batch call with that many rows
(continuous batching: a finished request's row takes the next question), timed end to end after a warm-up. One
record per point is appended to throughput.jsonl as it finishes, so an interrupted run resumes at the next point.
Peak memory: on CUDA the peak allocated bytes; on a CPU the process's peak resident set (weights included), reset
before each point through /proc/self/clear_refs.
"""
from __future__ import annotations

import csv
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
from tqdm import tqdm

from eagle_infer.models.chat import Message

from eagle_train.plumbing.benchmarks import Question
from eagle_train.plumbing.markdown import table as markdown_table
from .harness import HarnessSettings, prompt_for
from .metrics import tau
from .records import RecordWriter
from .report import line_plot

FILE = "throughput.jsonl"
FIELDS = ("benchmark", "method", "batch_size", "questions", "new_tokens", "wall_s", "tau", "peak_memory_bytes",
          "cache_bytes", "tokens")


def point_key(record: dict) -> tuple[str, str, int]:
    return record["benchmark"], record["method"], int(record["batch_size"])


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass  # not Linux: the peak then covers the whole process lifetime


def peak_memory(device: torch.device) -> int | None:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def measure(method, prompts: list[list[int]], settings: HarnessSettings, stops: list[int], batch_size: int,
            device: torch.device) -> dict:
    """One point: every prompt through one generate_batch call with `batch_size` rows."""
    reset_peak_memory(device)
    batch = method.generate_batch(prompts, settings.max_new_tokens, settings.sampling, stops, settings.seed, batch_size)
    cycles = [asdict(c) for r in batch.results for c in r.cycles]
    return {
        "method": method.name, "batch_size": batch_size, "questions": len(prompts), "new_tokens": batch.new_tokens,
        "wall_s": batch.wall_s, "tau": tau(cycles),
        "peak_memory_bytes": peak_memory(device), "cache_bytes": batch.cache_bytes,
        "tokens": [r.tokens for r in batch.results],
    }


def run(benchmarks: dict[str, list[Question]], methods: list, target, settings: HarnessSettings,
        batch_sizes: list[int], writer: RecordWriter, stops: list[int]) -> int:
    """Measure every (benchmark, method, batch size) not yet in the writer's file; returns how many were new."""
    prompts = {
        bench: [prompt_for(target, [Message("user", q.turns[0])], f"question {q.question_id}", settings.max_new_tokens)
                for q in questions]
        for bench, questions in benchmarks.items()
    }
    done = writer.done_keys()
    todo = [(bench, size, m) for bench in benchmarks for size in batch_sizes for m in methods
            if (bench, m.name, size) not in done]
    if not todo:
        return 0
    first = next(iter(prompts.values()))
    for m in {m.name: m for _, _, m in todo}.values():  # warm-up, not timed: one batch of two
        m.generate_batch(first[:2], 8, settings.sampling, stops, 0, min(2, len(first)))
    bar = tqdm(todo, unit="point")
    for bench, size, method in bar:
        bar.set_description(f"{bench}/{method.name}/batch {size}")
        writer.append({"benchmark": bench, **measure(method, prompts[bench], settings, stops, size, target.device)})
    return len(todo)


@dataclass
class ThroughputRow:
    """One (benchmark, method, batch size) point; speedup is against vanilla at the same batch size, scaling
    against the same method at batch size 1; identical: share of questions whose tokens equal vanilla's at batch 1."""

    benchmark: str
    batch_size: int
    method: str
    questions: int
    tok_s: float
    speedup: float | None
    scaling: float | None
    tau: float | None
    peak_memory_mib: float | None
    cache_mib: float
    identical: float | None


def rows(records: list[dict], baseline: str = "vanilla") -> list[ThroughputRow]:
    by_key = {point_key(r): r for r in records}

    def tok_s(r: dict | None) -> float | None:
        return r["new_tokens"] / r["wall_s"] if r and r["wall_s"] > 0 else None

    out = []
    for r in sorted(records, key=lambda r: (r["benchmark"], r["batch_size"], r["method"] != baseline, r["method"])):
        bench, size = r["benchmark"], r["batch_size"]
        speed, base = tok_s(r), by_key.get((bench, baseline, size))
        first, reference = by_key.get((bench, r["method"], 1)), by_key.get((bench, baseline, 1))
        same = [a == b for a, b in zip(r["tokens"], reference["tokens"])] if reference else []
        out.append(ThroughputRow(
            bench, size, r["method"], r["questions"], speed,
            speed / tok_s(base) if base and r["method"] != baseline else None,
            speed / tok_s(first) if first else None,
            r["tau"], r["peak_memory_bytes"] / 2**20 if r["peak_memory_bytes"] else None, r["cache_bytes"] / 2**20,
            sum(same) / len(same) if same else None,
        ))
    return out


def write_table(table: list[ThroughputRow], out_dir: Path) -> str:
    """throughput.csv (every column) and throughput.md; returns the Markdown."""
    with open(out_dir / "throughput.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow([fl.name for fl in fields(ThroughputRow)])
        writer.writerows([getattr(row, fl.name) for fl in fields(ThroughputRow)] for row in table)

    def fmt(value, spec):
        return "" if value is None else spec.format(value)

    header = ["benchmark", "batch", "method", "tok/s", "vs vanilla", "vs batch 1", "τ", "peak memory MiB", "KV cache MiB",
              "identical to vanilla batch 1"]
    markdown = markdown_table(header, [
        [r.benchmark, r.batch_size, r.method, f"{r.tok_s:.1f}", fmt(r.speedup, "{:.2f}x"), fmt(r.scaling, "{:.2f}x"),
         fmt(r.tau, "{:.2f}"), fmt(r.peak_memory_mib, "{:.0f}"), f"{r.cache_mib:.1f}", fmt(r.identical, "{:.0%}")]
        for r in table
    ])
    (out_dir / "throughput.md").write_text(markdown, encoding="utf-8")
    return markdown


def plot(table: list[ThroughputRow], out_dir: Path) -> list[str]:
    """throughput.png: tokens/s against batch size, one line per (benchmark, method)."""
    sizes = sorted({r.batch_size for r in table})
    by_key = {(r.benchmark, r.method, r.batch_size): r.tok_s for r in table}
    lines = dict.fromkeys((r.benchmark, r.method) for r in table)
    series = {f"{b}/{m}": [by_key.get((b, m, s)) for s in sizes] for b, m in lines}
    return [str(line_plot(out_dir / "throughput.png", "batch size", "output tokens/s", sizes, series))] if table else []
