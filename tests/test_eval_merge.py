"""eval.merge: runs split by benchmark merge into one table; overlapping runs are refused."""
import json

import pytest

from eagle_infer.errors import EagleError
from eval.merge import merge


def _record(bench, method, qid, wall):
    cycles = [{"tree_size": 0 if method == "vanilla" else 4, "tree_depth": 0 if method == "vanilla" else 2,
               "accepted": 0 if method == "vanilla" else 1, "draft_s": 0.0, "verify_s": 0.1,
               "tested_conf": [], "tested_hit": []}] * 5
    return {"benchmark": bench, "method": method, "question_id": qid, "turns": ["x"], "new_tokens": 10,
            "wall_s": wall, "cycles": cycles, "temperature": 0.0, "tokens": [1] * 10}


def _run(path, records):
    path.mkdir()
    (path / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_merge_disjoint_runs(tmp_path):
    a = _run(tmp_path / "a", [_record("gsm8k", "vanilla", "1", 1.0), _record("gsm8k", "eagle2", "1", 0.5)])
    b = _run(tmp_path / "b", [_record("nq", "vanilla", "1", 1.0), _record("nq", "eagle2", "1", 0.25)])
    table = merge(tmp_path / "all", [a, b])
    assert "gsm8k" in table and "nq" in table
    csv = (tmp_path / "all" / "table.csv").read_text().splitlines()
    eagle_nq = next(line for line in csv if line.startswith("nq,eagle2"))
    assert eagle_nq.split(",")[5] == "4.0"  # speedup_vs_vanilla: 40 tok/s over 10 tok/s
    assert len((tmp_path / "all" / "records.jsonl").read_text().splitlines()) == 4


def test_merge_refuses_overlap(tmp_path):
    a = _run(tmp_path / "a", [_record("nq", "vanilla", "1", 1.0)])
    b = _run(tmp_path / "b", [_record("nq", "vanilla", "1", 1.0)])
    with pytest.raises(EagleError, match="more than one run"):
        merge(tmp_path / "all", [a, b])
