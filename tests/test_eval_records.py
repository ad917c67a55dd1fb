"""eval.records: resumable JSONL records."""
import pytest

from eagle_infer.errors import EagleError
from eval.records import RecordWriter, read_records


def record(qid, method="eagle2"):
    return {
        "benchmark": "mt_bench",
        "method": method,
        "question_id": qid,
        "turns": ["hi"],
        "new_tokens": 3,
        "wall_s": 0.1,
        "cycles": [],
        "temperature": 0.0,
        "tokens": [1, 2, 3],
    }


def test_resume_keys_after_appends(tmp_path):
    path = tmp_path / "out" / "records.jsonl"
    writer = RecordWriter(path)
    assert writer.done_keys() == set()
    writer.append(record("81"))
    writer.append(record("82", method="vanilla"))
    expected = {("mt_bench", "eagle2", "81"), ("mt_bench", "vanilla", "82")}
    assert writer.done_keys() == expected
    assert RecordWriter(path).done_keys() == expected
    assert [r["question_id"] for r in read_records(path)] == ["81", "82"]


def test_truncated_last_line_dropped(tmp_path):
    path = tmp_path / "records.jsonl"
    RecordWriter(path).append(record("81"))
    with open(path, "a") as f:
        f.write('{"benchmark": "mt_bench", "meth')  # interrupted mid-write
    assert len(read_records(path)) == 1
    writer = RecordWriter(path)
    assert writer.done_keys() == {("mt_bench", "eagle2", "81")}
    assert path.read_text().count("\n") == 1 and path.read_text().endswith("\n")
    writer.append(record("82"))
    assert [r["question_id"] for r in read_records(path)] == ["81", "82"]


def test_errors(tmp_path):
    path = tmp_path / "records.jsonl"
    path.write_text('{"a": 1}\nnot json\n{"b": 2}\n')
    with pytest.raises(EagleError, match=r"records.jsonl:2"):
        RecordWriter(path)
    with pytest.raises(EagleError, match="does not exist"):
        read_records(tmp_path / "missing.jsonl")
    with pytest.raises(EagleError, match="tokens"):
        RecordWriter(tmp_path / "new.jsonl").append({k: v for k, v in record("1").items() if k != "tokens"})
