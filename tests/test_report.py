"""eval.report: table files, plots and a disabled/offline wandb log, all under tmp_path."""
import csv

import pytest

from eagle_infer.errors import EagleError
from eval.metrics import ROW_COLUMNS, summarize
from eval.report import log_wandb, plot_all, write_calibration, write_table


def record(method, qid, wall_s, cycles):
    return {
        "benchmark": "mt_bench",
        "method": method,
        "question_id": qid,
        "turns": ["a"],
        "new_tokens": 8,
        "wall_s": wall_s,
        "cycles": cycles,
        "temperature": 0.0,
        "tokens": [1, 2],
    }


CYCLE = {"tree_size": 4, "tree_depth": 2, "accepted": 1, "draft_s": 0.01, "verify_s": 0.02,
         "tested_conf": [0.9, 0.3], "tested_hit": [True, False]}
RECORDS = [
    record("vanilla", "1", 2.0, []),
    record("eagle2", "1", 1.0, [CYCLE] * 3),
    record("hf_generate", "1", 3.0, []),
]


def test_write_table(tmp_path):
    markdown = write_table(summarize(RECORDS), tmp_path)
    with open(tmp_path / "table.csv", newline="") as f:
        assert tuple(next(csv.reader(f))) == ROW_COLUMNS
    assert (tmp_path / "table.md").read_text() == markdown
    assert "| mt_bench | eagle2 | 2.00x | 3.00x | 2.00 | 8.0 | 100% |" in markdown
    assert "| mt_bench | vanilla | 1.00x | 1.50x | — |" in markdown


def test_calibration_table_sets_mean_confidence_beside_the_accepted_share(tmp_path):
    markdown = write_calibration(RECORDS, tmp_path)
    assert (tmp_path / "calibration.md").read_text() == markdown
    lines = markdown.splitlines()
    assert "| eagle2 | 0.3–0.4 | 3 | 0.300 | 0.000 | -0.300 |" in lines
    assert "| eagle2 | 0.9–1.0 | 3 | 0.900 | 1.000 | +0.100 |" in lines
    assert len(lines) == 4  # header, rule, two buckets: empty buckets and methods without drafts have no row


def test_plots_and_wandb(tmp_path, monkeypatch):
    rows = summarize(RECORDS)
    paths = plot_all(RECORDS, rows, tmp_path / "plots")
    assert {p.rsplit("/", 1)[1] for p in paths} == {
        "speedup.png", "tau.png", "accept_length.png", "alpha.png", "calibration.png"
    }
    assert all(open(p, "rb").read(8) == b"\x89PNG\r\n\x1a\n" for p in paths)
    with pytest.raises(EagleError, match="wandb mode 'cloud'"):
        log_wandb(rows, paths, "test", {}, mode="cloud")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    log_wandb(rows, paths, "test", {"method": "eagle2"}, mode="offline")
    assert list((tmp_path / "wandb").glob("offline-run-*/*.wandb"))


def test_half_precision_table_says_why_answers_can_differ(tmp_path):
    assert "rounds" not in write_table(summarize(RECORDS), tmp_path, "float32")
    note = write_table(summarize(RECORDS), tmp_path, "bfloat16").rsplit("\n\n", 1)[1]
    assert "bfloat16" in note and "float32" in note and "\n" not in note.strip()


def test_identical_line_counts_answers_equal_to_vanilla():
    from eval.identical import identical_line

    records = [{"benchmark": "mt_bench", "method": m, "question_id": q, "tokens": t} for m, q, t in (
        ("vanilla", "1", [1, 2]), ("vanilla", "2", [3]), ("eagle2", "1", [1, 2]), ("eagle2", "2", [4]),
        ("chain", "1", [1, 2]))]
    assert identical_line(records, "float32 greedy") == (
        "float32 greedy: eagle2 = vanilla on 1/2 answers, chain = vanilla on 1/1 answers")
    with pytest.raises(EagleError, match="no vanilla"):
        identical_line(records[2:], "x")
