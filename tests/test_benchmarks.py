"""eagle_train.plumbing.benchmarks: the shared question files, the PyPI-shipped sources and the user errors."""
import json
import os
from pathlib import Path

import pytest

from eagle_infer.errors import EagleError
from eagle_train.plumbing import benchmarks
from eagle_train.plumbing.benchmarks import BENCHMARKS, load_benchmark

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_BENCH_DATA_DIR = REPO_ROOT / ".." / "shared" / "data" / "benchmarks"
BENCH_DATA_DIR = Path(os.environ.get("EAGLE_BENCH_DATA_DIR", DEFAULT_BENCH_DATA_DIR)).resolve()
needs_shared = pytest.mark.skipif(not BENCH_DATA_DIR.is_dir(), reason=f"no benchmark data at {BENCH_DATA_DIR}")


@needs_shared
@pytest.mark.parametrize("name", BENCHMARKS)
def test_shared_data_parses(name):
    questions = load_benchmark(name, str(BENCH_DATA_DIR))
    assert len(questions) >= 79
    assert all(isinstance(q.question_id, str) and q.turns and all(q.turns) for q in questions)
    assert len({q.question_id for q in questions}) == len(questions)


@needs_shared
def test_mt_bench_shared_has_80_two_turn_questions():
    questions = load_benchmark("mt_bench", str(BENCH_DATA_DIR))
    assert len(questions) == 80 and all(len(q.turns) == 2 for q in questions)
    assert [q.question_id for q in load_benchmark("mt_bench", str(BENCH_DATA_DIR), limit=3)] == ["81", "82", "83"]


@pytest.mark.parametrize("name", ["mt_bench", "humaneval", "gsm8k"])
@pytest.mark.parametrize("use_empty_dir", [False, True])
def test_package_sources(name, use_empty_dir, tmp_path):
    questions = load_benchmark(name, str(tmp_path) if use_empty_dir else None)
    assert len(questions) == 80
    assert all(q.turns and all(isinstance(t, str) and t for t in q.turns) for q in questions)
    if name == "mt_bench":
        assert all(len(q.turns) == 2 for q in questions)
    else:
        assert len(questions[0].turns) == 1 and questions[0].reference
        again = [q.question_id for q in load_benchmark(name, None)]
        assert again == [q.question_id for q in questions]  # fixed seed
        assert again != [q.question_id for q in load_benchmark(name, None, seed=1)]
    if name == "humaneval":
        assert questions[0].turns[0].startswith("Complete the following Python function:\n```python\n")


def test_unknown_name(tmp_path):
    with pytest.raises(EagleError, match="unknown benchmark 'mtbench'.*mt_bench, humaneval.*no bench.data_dir"):
        load_benchmark("mtbench", None)
    with pytest.raises(EagleError, match="unknown benchmark 'mine'.*mine/question.jsonl \\(missing\\)"):
        load_benchmark("mine", str(tmp_path))


def test_other_question_sets_load_from_the_data_dir(tmp_path):
    """A name outside the six is a question set of the data directory (e.g. a head's held-out prompts)."""
    (tmp_path / "heldout").mkdir()
    lines = [{"question_id": str(i), "category": "heldout", "turns": [f"question {i}"]} for i in (3, 5, 9)]
    (tmp_path / "heldout" / "question.jsonl").write_text("".join(json.dumps(q) + "\n" for q in lines))
    questions = load_benchmark("heldout", str(tmp_path), limit=2)
    assert [(q.question_id, q.turns) for q in questions] == [("3", ["question 3"]), ("5", ["question 5"])]


def test_empty_and_malformed_files(tmp_path):
    (tmp_path / "nq").mkdir()
    path = tmp_path / "nq" / "question.jsonl"
    path.write_text("\n")
    with pytest.raises(EagleError, match=r"question file .*question.jsonl is empty"):
        load_benchmark("nq", str(tmp_path))
    path.write_text('{"question_id": 1, "turns": ["Who?"]}\n{"question_id": 2, "turns": "Who?"}\n')
    with pytest.raises(EagleError, match=r"question.jsonl:2: malformed"):
        load_benchmark("nq", str(tmp_path))
    path.write_text('{"question_id": 1, "turns": ["Who?"]}\n{"question_id": 2, \n')
    with pytest.raises(EagleError, match=r"question.jsonl:2: malformed"):
        load_benchmark("nq", str(tmp_path))


def test_limit_and_no_source(tmp_path, monkeypatch):
    assert len(load_benchmark("gsm8k", None, limit=5)) == 5
    with pytest.raises(EagleError, match="limit 0"):
        load_benchmark("gsm8k", None, limit=0)

    def offline(*args):
        raise ConnectionError("offline")

    monkeypatch.setattr(benchmarks, "_hub_rows", offline)
    with pytest.raises(EagleError, match=r"tried .*alpaca/question.jsonl \(missing\); hub dataset tatsu-lab/alpaca "
                                         r"\(ConnectionError\); set bench.data_dir"):
        load_benchmark("alpaca", str(tmp_path))
