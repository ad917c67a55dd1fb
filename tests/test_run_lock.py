"""One writer per eval run directory: a second process is refused in one line naming the holder's pid, the lock
dies with its holder (SIGKILL included), and a records file holding duplicates is repaired on opening."""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from eagle_infer.errors import EagleError
from eval.metrics import summarize
from eval.records import RECORD_FIELDS, RecordWriter, RunLock, read_records

REPO = Path(__file__).resolve().parent.parent
HOLD = "import sys; from eval.records import RunLock\nwith RunLock(sys.argv[1]):\n    print('locked', flush=True)\n    sys.stdin.read()"


def env() -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
            "WANDB_MODE": "disabled"}


def holder(run_dir: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(run_dir)], cwd=REPO, env=env(), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_second_eval_with_the_same_run_name_is_refused(tmp_path):
    run_dir = tmp_path / "results" / "same-name"
    first = holder(run_dir)
    try:
        second = subprocess.run(
            [sys.executable, "-m", "eval.cli", "run=same-name", f"results_dir={tmp_path / 'results'}",
             "bench.names=[mt_bench]", "bench.limit=1", f"bench.data_dir={tmp_path / 'no-data'}"],
            cwd=REPO, env=env(), capture_output=True, text=True, timeout=120)
        lines = [line for line in second.stderr.splitlines() if line.strip()]
        assert second.returncode == 2 and len(lines) == 1, second.stderr
        assert lines[0] == (f"error: run directory {str(run_dir)!r} is in use by process {first.pid} (an eval with the "
                            "same run name): wait for it to end, or give another run=NAME")
    finally:
        first.stdin.close()
        assert first.wait(timeout=30) == 0
    with RunLock(run_dir):  # released when its holder ended
        pass


def test_lock_dies_with_a_killed_holder(tmp_path):
    first = holder(tmp_path)
    with pytest.raises(EagleError, match=f"in use by process {first.pid} "):
        with RunLock(tmp_path):
            pass
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    with RunLock(tmp_path) as lock:  # the stale .lock file does not block
        assert (tmp_path / ".lock").read_text() == f"{os.getpid()}\n" and lock.fd is not None


def record(qid: str, new_tokens: int) -> dict:
    return {"benchmark": "mt_bench", "method": "vanilla", "question_id": qid, "turns": ["a"], "new_tokens": new_tokens,
            "wall_s": 1.0, "cycles": [{"accepted": 0}] * new_tokens, "temperature": 0.0, "tokens": [1] * new_tokens}


def test_duplicate_records_are_repaired_keeping_the_first(tmp_path, caplog):
    path = tmp_path / "records.jsonl"
    written = [record("q1", 3), record("q2", 4), record("q1", 9), record("q2", 5), record("q3", 2)]
    assert all(set(RECORD_FIELDS) <= set(r) for r in written)
    path.write_text("".join(json.dumps(r) + "\n" for r in written))
    with pytest.raises(EagleError, match="duplicate records"):
        summarize(read_records(path))
    with caplog.at_level(logging.WARNING):
        writer = RecordWriter(path)
    assert "held 2 duplicate record(s)" in caplog.text and "kept the first of each key" in caplog.text
    assert read_records(path) == writer.records == [written[0], written[1], written[4]]
    assert writer.done_keys() == {("mt_bench", "vanilla", q) for q in ("q1", "q2", "q3")}
