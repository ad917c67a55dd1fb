"""Training curves of ablation rows: read from a row's logs (resumed steps once), merged into the committed file,
plotted for the spec's rows."""
from __future__ import annotations

import json

import pytest

import lab.ablate_head as ab
from eagle_infer.errors import EagleError
from lab.result_store import merge, read
from lab.training_curves import CURVES, WINDOWS, plot_curves, row_curves


def write_logs(row_dir, steps: int, resumed_from: int | None = None, unrolled: int = 0):
    """train.jsonl with cls_loss = 1/step (a resumed run logs steps after `resumed_from` a second time with loss
    1000, the later line), eval.jsonl every 10 steps."""
    row_dir.mkdir(parents=True)
    lines = [{"step": s, "cls_loss": 1 / s, "loss": 2 / s} for s in range(1, steps + 1)]
    if resumed_from is not None:
        lines[resumed_from:resumed_from] = [{"step": s, "cls_loss": 1000.0} for s in range(resumed_from + 1, steps + 1)]
    (row_dir / "train.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    evals = [{"step": s, "heldout/top1": s / steps, **{f"heldout/top1_{k}": s / steps / (k + 1) for k in
                                                     range(1, unrolled + 1)},
              **{f"heldout/alpha_{k}": 0.5 for k in range(6)}, "heldout/alpha_6": float("nan")}
             for s in range(10, steps + 1, 10)]
    (row_dir / "eval.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evals))


def test_row_curves_keep_one_line_per_step_and_window_the_loss(tmp_path):
    write_logs(tmp_path / "r", steps=500, resumed_from=300, unrolled=2)
    curves = row_curves(tmp_path / "r")
    assert curves["steps"] == 500
    assert [e["step"] for e in curves["eval"]] == list(range(10, 501, 10))
    last = curves["eval"][-1]
    assert last["top1"] == 1.0 and last["top1_steps"] == [1.0, 0.5, pytest.approx(1 / 3, abs=1e-5)]
    assert last["alpha"] == [0.5] * 6 + [None]  # NaN: no chain reached position 6
    width = 500 // WINDOWS  # 5 steps per window
    assert len(curves["cls_loss"]) == WINDOWS and curves["cls_loss"][0][0] == width
    first = sum(1 / s for s in range(1, width + 1)) / width
    assert curves["cls_loss"][0][1] == pytest.approx(first, abs=1e-5)
    assert all(v < 1 for _, v in curves["cls_loss"])  # the first run's lines after step 300 were replaced
    assert row_curves(tmp_path / "none") is None


def test_rows_without_the_training_time_test_have_one_unrolled_step(tmp_path):
    write_logs(tmp_path / "r", steps=20)
    assert row_curves(tmp_path / "r")["eval"][-1]["top1_steps"] == [1.0]


def curves(steps: int) -> dict:
    return {"steps": steps, "eval": [], "cls_loss": []}


def test_merge_replaces_a_rows_curves_and_keeps_the_others(tmp_path):
    path = tmp_path / "c.json"
    assert merge(CURVES, path, {"b": curves(1), "a": curves(2)}, ["a", "b"])
    assert list(read(CURVES, path)) == ["a", "b"]
    assert not merge(CURVES, path, {"a": curves(2)}, ["a", "b"])  # unchanged file
    assert merge(CURVES, path, {"b": curves(3), "z": curves(4)}, ["a", "b"])
    assert read(CURVES, path) == {"a": curves(2), "b": curves(3), "z": curves(4)}


def test_plot_draws_the_named_rows_that_have_curves(tmp_path):
    write_logs(tmp_path / "eagle3", steps=40, unrolled=6)
    write_logs(tmp_path / "eagle1", steps=30)
    curves = {"eagle3": row_curves(tmp_path / "eagle3"), "eagle1": row_curves(tmp_path / "eagle1")}
    assert plot_curves(curves, ["missing"], tmp_path / "none.png") is None
    assert plot_curves(curves, ["eagle1", "eagle3", "missing"], tmp_path / "p.png") == tmp_path / "p.png"
    assert (tmp_path / "p.png").stat().st_size > 0


def test_ablate_head_records_finished_rows_curves_and_plots_the_specs(tmp_path):
    out, root = tmp_path / "out", tmp_path / "checkout"
    write_logs(out / "done", steps=20)
    write_logs(out / "running", steps=20)
    spec = {"rows": [{"name": "done"}, {"name": "running"}], "curves": ["done"]}
    results = [{"row": "done", "status": "done"}, {"row": "running", "status": "not run"}]
    picture = ab.record_curves(root, "s", spec, out, results)
    assert picture is not None and picture.exists()
    assert list(read(CURVES, root / "docs/results/data/ablation/s-curves.json")) == ["done"]
    assert ab.record_curves(root, "s", spec, out, results) is None  # nothing new: the plot is not redrawn


def test_curves_naming_no_row_is_a_one_line_error(monkeypatch, tmp_path):
    shipped = ab.load_spec("smollm2-135m")
    assert set(shipped["curves"]) <= {r["name"] for r in shipped["rows"]}
    (tmp_path / "conf" / "ablate").mkdir(parents=True)
    (tmp_path / "conf" / "ablate" / "bad.yaml").write_text(
        "curves: [nope]\nrows:\n  - {name: r, loss_tokens: 1, overrides: []}\n")
    monkeypatch.setattr(ab, "REPO", tmp_path)
    with pytest.raises(EagleError, match="curves names 'nope', which is no row"):
        ab.load_spec("bad")


def test_the_committed_curve_files_read():
    from lab.ablation_file import ABLATION_DIR
    from tests.test_ablation_file import ROOT

    files = sorted((ROOT / ABLATION_DIR).glob("*-curves.json"))
    assert files and all(read(CURVES, path) for path in files)
