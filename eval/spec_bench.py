"""Spec-Bench answer files: every eval run also writes `model_answer/<method>.jsonl` in Spec-Bench's schema, so its
own `evaluation/speed.py` and `equal.py` read our runs.

One line per (benchmark, question): question_id, category, answer_id, model_id ("<model>-<method>") and
choices[0] = {index, turns (answer texts), decoding_steps, new_tokens, wall_time (per turn), accept_lengths (tokens
each target forward emitted, per cycle: accepted + 1)}. Categories are the questions' own, except that a benchmark
Spec-Bench holds under a task name of its own carries that name (GSM8K -> math_reasoning, CNN/DailyMail ->
summarization, Natural Questions -> qa), so speed.py's task filters select it and GSM8K's "math" is not counted
with MT-bench's. Records written before per-turn figures were kept hold one turn's worth: their totals.
"""
from __future__ import annotations

import json
from pathlib import Path

SPEC_BENCH_TASKS = {"gsm8k": "math_reasoning", "cnn_dm": "summarization", "nq": "qa"}


def category(record: dict) -> str:
    """The Spec-Bench category of a record: its benchmark's Spec-Bench task, else the question's own category
    (the benchmark's name when the question has none)."""
    return SPEC_BENCH_TASKS.get(record["benchmark"]) or record.get("category") or record["benchmark"]


def answer(record: dict, model: str) -> dict:
    """One Spec-Bench answer line of an eval record."""
    tokens = record.get("turn_tokens") or [record["new_tokens"]]
    return {
        "question_id": record["question_id"],
        "category": category(record),
        "answer_id": f"{record['benchmark']}-{record['question_id']}-{record['method']}",
        "model_id": f"{model}-{record['method']}",
        "choices": [{
            "index": 0,
            "turns": record["turns"],
            "decoding_steps": record.get("turn_steps") or [len(record["cycles"])],
            "new_tokens": tokens,
            "wall_time": record.get("turn_wall_s") or [record["wall_s"]],
            "accept_lengths": [c["accepted"] + 1 for c in record["cycles"]],
        }],
    }


def write_answer_files(records: list[dict], out_dir: Path, model: str) -> list[Path]:
    """out_dir/model_answer/<method>.jsonl for every method of `records` (":" in a label becomes "_"), rewritten
    whole from the records each time; returns the paths."""
    directory = Path(out_dir) / "model_answer"
    directory.mkdir(parents=True, exist_ok=True)
    by_method: dict[str, list[dict]] = {}
    for record in records:
        by_method.setdefault(record["method"], []).append(record)
    paths = []
    for method, rows in by_method.items():
        path = directory / f"{method.replace(':', '_')}.jsonl"
        tmp = path.with_suffix(".partial")
        tmp.write_text("".join(json.dumps(answer(r, model)) + "\n" for r in rows), encoding="utf-8")
        tmp.rename(path)
        paths.append(path)
    return paths
