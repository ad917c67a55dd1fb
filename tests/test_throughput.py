"""Throughput mode: one point per (method, batch size) from one generate_batch call, resumable, and its table."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from eagle_infer.decoding.records import BatchResult, CycleStats, GenerationResult
from eval import throughput
from eagle_train.plumbing.benchmarks import Question
from eval.harness import HarnessSettings
from eval.records import RecordWriter
from eval.report import log_wandb


class FakeBatcher:
    """Emits 4 tokens per prompt; a batch of n rows takes 1 + n/4 seconds of pretend time."""

    def __init__(self, name: str, accepted: int = 0):
        self.name, self.accepted, self.calls = name, accepted, []

    def generate_batch(self, prompts, max_new, sampling, stops, seed, batch_size=1) -> BatchResult:
        self.calls.append((len(prompts), batch_size))
        tokens = [[7, 8, 9, 10] if i != 1 or self.name == "vanilla" else [7, 8, 9, 11] for i in range(len(prompts))]
        cycles = [CycleStats(tree_size=4, tree_depth=2, accepted=self.accepted, draft_s=0.0, verify_s=0.0,
                             batch=batch_size)] * 2
        results = [GenerationResult(tokens=t, cycles=cycles, prefill_s=0.0, wall_s=1.0, stop_reason="length")
                   for t in tokens]
        return BatchResult(results=results, wall_s=len(prompts) * 4 / (8.0 * batch_size ** 0.5), batch_size=batch_size,
                           cache_bytes=1024 * batch_size)


def test_points_are_measured_once_and_tabled(tiny_smol, tmp_path, monkeypatch):
    questions = [Question(f"q{i}", "writing", [f"Question {i}?", "a second turn, ignored"], None) for i in range(3)]
    methods = [FakeBatcher("vanilla"), FakeBatcher("eagle2", accepted=1)]
    path = tmp_path / throughput.FILE
    writer = RecordWriter(path, throughput.FIELDS, throughput.point_key)
    settings = HarnessSettings(max_new_tokens=4)
    assert throughput.run({"mt_bench": questions}, methods, tiny_smol, settings, [1, 4], writer, [2]) == 4
    # A warm-up batch of two, then every question in one call per batch size.
    assert methods[1].calls == [(2, 2), (3, 1), (3, 4)]
    again = RecordWriter(path, throughput.FIELDS, throughput.point_key)
    assert throughput.run({"mt_bench": questions}, methods, tiny_smol, settings, [1, 4], again, [2]) == 0
    table = {(r.batch_size, r.method): r for r in throughput.rows(again.records)}
    assert len(table) == 4
    assert table[(1, "vanilla")].tok_s == pytest.approx(8.0) and table[(4, "vanilla")].scaling == pytest.approx(2.0)
    assert table[(4, "eagle2")].speedup == pytest.approx(1.0) and table[(4, "eagle2")].tau == pytest.approx(2.0)
    assert table[(1, "eagle2")].identical == pytest.approx(2 / 3) and table[(4, "vanilla")].identical == 1.0
    assert table[(4, "eagle2")].cache_mib == pytest.approx(4 / 1024)
    assert all(r.peak_memory_mib and r.peak_memory_mib > 1 for r in table.values())  # Linux: VmHWM
    markdown = throughput.write_table(throughput.rows(again.records), tmp_path)
    assert markdown.count("\n") == 6 and "| mt_bench | 4 | eagle2 | 16.0 | 1.00x | 2.00x | 2.00 |" in markdown
    assert (tmp_path / "throughput.csv").read_text().startswith("benchmark,batch_size,method,questions,tok_s")
    paths = throughput.plot(throughput.rows(again.records), tmp_path)
    assert [Path(p).name for p in paths] == ["throughput.png"] and Path(paths[0]).read_bytes()[:4] == b"\x89PNG"
    logged = {}

    class FakeRun:  # a stand-in for wandb (a real offline run is tested in test_report; wandb keeps global state)
        def log(self, data):
            logged.update(data)

        def finish(self):
            pass

    fake = type(sys)("wandb")
    fake.init = lambda **kw: FakeRun()
    fake.Table = lambda columns, data: (columns, data)
    fake.Image = lambda path: path
    monkeypatch.setitem(sys.modules, "wandb", fake)
    log_wandb(throughput.rows(again.records), paths, "throughput-test", {}, mode="offline")
    columns, data = logged["results"]
    assert columns[:4] == ["benchmark", "batch_size", "method", "questions"] and len(data) == 4
    assert logged["throughput"] == paths[0]


def test_sweep_over_the_batch_budget_reads_throughput_jobs(tmp_path):
    """A Hydra multirun of mode=throughput over infer.batch_token_budget aggregates into one point per
    (budget, batch size), with speedup against vanilla at the same batch size."""
    import json

    from eval.sweep import collect, write

    def point(method, size, wall):
        return {"benchmark": "mt_bench", "method": method, "batch_size": size, "questions": 2, "new_tokens": 64,
                "wall_s": wall, "tau": 1.5, "peak_memory_bytes": None, "cache_bytes": 0, "tokens": [[1], [2]]}

    for budget, eagle_wall in ((0, 8.0), (16, 4.0)):
        job = tmp_path / "sw" / f"infer.batch_token_budget={budget}"
        job.mkdir(parents=True)
        lines = [point("vanilla", 1, 8.0), point("eagle2", 1, 4.0), point("vanilla", 4, 4.0), point("eagle2", 4, eagle_wall)]
        (job / throughput.FILE).write_text("".join(json.dumps(r) + "\n" for r in lines))
    points = collect(tmp_path / "sw")
    got = {(p.settings["batch_token_budget"], p.settings["batch"]): p.speedup for p in points}
    assert got == {("0", "1"): 2.0, ("0", "4"): 0.5, ("16", "1"): 2.0, ("16", "4"): 1.0}
    md = write(points, tmp_path / "sw")
    assert "**best**" in md and (tmp_path / "sw" / "sweep_speedup.png").exists()
