"""The committed ablation result file: merged row by row, in spec order (refused when malformed: test_result_store),
rendered into docs/training.md by make results-docs, and written by make ablate-head for finished rows only."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import lab.ablate_head as ab
from eagle_train.training.train import ALPHA_STEPS
from lab.ablation_file import ABLATION, ALPHAS, ablation_path, full_lines
from lab.result_store import merge, read
from lab.results_docs import ABLATION_BEGIN, ABLATION_END, README, TRAINING, stale, write_docs

ROOT = Path(__file__).resolve().parent.parent


def line(row: str, tau: float, commit: str = "abc1234", **figures) -> dict:
    return {"row": row, "loss_tokens": 1000, "epochs": 2, "top1": 0.5, "tau": tau, "trained_on": "Some CPU",
            "commit": commit, **figures}


def test_alpha_columns_match_training():
    assert ALPHAS == ALPHA_STEPS


def test_merge_replaces_changed_rows_keeps_others_and_orders_by_spec(tmp_path):
    path = ablation_path(tmp_path, "spec")
    assert merge(ABLATION, path, full_lines([line("b", 1.5), line("old", 1.2)]), ["a", "b"])
    assert merge(ABLATION, path, full_lines([line("a", 1.8, commit="def5678")]), ["a", "b"])
    assert list(read(ABLATION, path)) == ["a", "b", "old"]  # spec order, rows no longer in the spec last
    # the same figures measured again at another commit keep the line that first recorded them
    assert not merge(ABLATION, path, full_lines([line("b", 1.5, commit="fff0000")]), ["a", "b"])
    assert read(ABLATION, path)["b"]["commit"] == "abc1234"
    assert merge(ABLATION, path, full_lines([line("b", 1.6, commit="fff0000")]), ["a", "b"])
    rows = read(ABLATION, path)
    assert rows["b"]["tau"] == 1.6 and rows["b"]["commit"] == "fff0000" and rows["a"]["alpha_3"] is None
    assert rows["a"]["loss_tokens"] == 1000 and isinstance(rows["a"]["loss_tokens"], int)


def test_results_docs_render_the_training_table_from_the_file(tmp_path):
    root = tmp_path / "checkout"
    (root / TRAINING).parent.mkdir(parents=True)
    shutil.copy(ROOT / README, root / README)
    shutil.copy(ROOT / TRAINING, root / TRAINING)
    merge(ABLATION, ablation_path(root, "smollm2-135m"),
          full_lines([line("r1", 2.345, speedup=1.416, speed_cpu="Some CPU AMX")]))
    write_docs(root)
    text = (root / TRAINING).read_text()
    block = text[text.index(ABLATION_BEGIN):text.index(ABLATION_END)]
    assert "[smollm2-135m.csv](results/data/ablation/smollm2-135m.csv)" in block
    assert "| r1 | 1000 | 2 | 0.500 | – |" in block and "| 2.35 | – | 1.42x (Some CPU AMX) | – | Some CPU | abc1234 |" in block
    assert stale(root) == []
    merge(ABLATION, ablation_path(root, "smollm2-135m"), full_lines([line("r1", 2.5)]))
    assert stale(root) == [root / TRAINING]


def test_ablate_head_records_finished_rows_with_their_training_machine(tmp_path, git_checkout):
    repo = git_checkout
    out = tmp_path / "runs"
    (out / "done" / "head").mkdir(parents=True)
    (out / "done" / "summary.json").write_text(json.dumps({"loss_tokens": 10, "epochs": 1, "train_s": 60.0}))
    (out / "done" / "head" / "card.json").write_text(json.dumps({"machine": "Some CPU, 2 threads"}))
    spec = {"rows": [{"name": "done"}, {"name": "pending"}]}
    results = [ab.row_result(out, {"name": "done"}, "done", 1.7), ab.row_result(out, {"name": "pending"}, "pending", None)]
    path = ab.record_rows(repo, "spec", spec, out, results)
    assert path == ablation_path(repo, "spec")
    rows = read(ABLATION, path)
    assert list(rows) == ["done"] and rows["done"]["trained_on"] == "Some CPU, 2 threads"
    assert rows["done"]["tau"] == 1.7 and rows["done"]["train_min"] == 1.0
    assert " " not in rows["done"]["commit"]  # the result file itself, new under docs/, leaves the code unchanged
    (repo / "code.py").write_text("x = 1\n")
    results[0]["tau"] = 1.8
    ab.record_rows(repo, "spec", spec, out, results)
    assert read(ABLATION, path)["done"]["commit"].endswith(" with uncommitted changes")
    assert ab.record_rows(repo, "spec", spec, out, results) is None  # nothing new: the file is unchanged
    assert ab.record_rows(out, "spec", spec, out, results) is None  # not a checkout: nothing written
    assert not ablation_path(out, "spec").exists()
