"""Spec-Bench answer files and the per-category table, from records the real harness writes."""
from __future__ import annotations

import json

import numpy as np

from eagle_train.plumbing.benchmarks import Question
from eval.harness import HarnessSettings
from eval.harness import run as harness_run
from eval.records import RecordWriter, read_records
from eval.report import category_table
from eval.spec_bench import write_answer_files
from tests.test_cli import FakeMethod


class SlowFake(FakeMethod):
    """FakeMethod under another name, its batches taking twice as long (half the tokens/s)."""

    name = "slow"

    def generate_batch(self, *args, **kwargs):
        result = super().generate_batch(*args, **kwargs)
        result.wall_s *= 2
        return result


def spec_bench_speedup(answers: list[dict], base: list[dict], task: set[str]) -> float:
    """Spec-Bench evaluation/speed.py's speedup, computed as it does (mean per-answer tok/s over the mean of the
    baseline's; the baseline's tokens from new_tokens here, where speed.py re-tokenizes the text)."""
    speed = lambda rows: np.mean([sum(r["choices"][0]["new_tokens"]) / sum(r["choices"][0]["wall_time"])  # noqa: E731
                                  for r in rows if r["category"] in task])
    return float(speed(answers) / speed(base))


def test_answer_files_follow_spec_bench_and_give_its_speedup(tiny_smol, tmp_path):
    mt = [Question("81", "writing", ["Hello", "Again"], None), Question("111", "math", ["2+2?"], None)]
    gsm = [Question("0", "math", ["3+3?"], None)]
    writer = RecordWriter(tmp_path / "records.jsonl")
    harness_run({"mt_bench": mt, "gsm8k": gsm}, [FakeMethod(), SlowFake()], tiny_smol, HarnessSettings(max_new_tokens=5),
                writer, [2])
    records = read_records(tmp_path / "records.jsonl")
    paths = write_answer_files(records, tmp_path, "tiny-smol")
    assert sorted(p.name for p in paths) == ["fake.jsonl", "slow.jsonl"]
    fake = [json.loads(line) for line in (tmp_path / "model_answer" / "fake.jsonl").read_text().splitlines()]
    slow = [json.loads(line) for line in (tmp_path / "model_answer" / "slow.jsonl").read_text().splitlines()]
    first = fake[0]
    assert set(first) == {"question_id", "category", "answer_id", "model_id", "choices"}
    assert first["model_id"] == "tiny-smol-fake" and first["category"] == "writing"
    choice = first["choices"][0]
    assert set(choice) == {"index", "turns", "decoding_steps", "new_tokens", "wall_time", "accept_lengths"}
    assert len(choice["turns"]) == len(choice["new_tokens"]) == len(choice["wall_time"]) == 2  # per turn
    assert choice["new_tokens"] == [3, 3] and choice["accept_lengths"] == [3, 3] and choice["decoding_steps"] == [1, 1]
    assert [a["category"] for a in fake] == ["writing", "math", "math_reasoning"]  # GSM8K under Spec-Bench's task name
    # speed.py's "mt_bench" task takes MT-bench's categories only; the slow method runs at half the speed.
    mt_bench_task = {"writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities"}
    assert abs(spec_bench_speedup(slow, fake, mt_bench_task) - 0.5) < 1e-9


def test_category_table_breaks_down_benchmarks_with_several_categories():
    def record(bench, qid, category, method, wall):
        return {"benchmark": bench, "method": method, "question_id": qid, "category": category, "turns": ["x"],
                "new_tokens": 4, "wall_s": wall, "cycles": [{"tree_depth": 1, "accepted": 1, "draft_s": 0.0,
                                                              "verify_s": 0.0, "tested_conf": [], "tested_hit": []}],
                "temperature": 0.0, "tokens": [1, 2, 3, 4]}
    records = [record("mt_bench", "1", "writing", "vanilla", 2.0), record("mt_bench", "1", "writing", "eagle2", 1.0),
               record("mt_bench", "2", "math", "vanilla", 2.0), record("mt_bench", "2", "math", "eagle2", 0.5),
               record("gsm8k", "3", "math", "vanilla", 1.0), record("gsm8k", "3", "math", "eagle2", 1.0)]
    md = category_table(records)
    assert "| mt_bench / writing | eagle2 | 2.00x |" in md and "| mt_bench / math | eagle2 | 4.00x |" in md
    assert "gsm8k" not in md  # one category: the benchmark's own row says it all
    assert category_table(records[4:]) == ""
