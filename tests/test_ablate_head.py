"""make ablate-head's driver: spec checks, pending rows, resumed rows, the table, families for the plot."""
from __future__ import annotations

import json

import pytest

import eval.ablate_head as ab
from eagle_infer.errors import EagleError


@pytest.fixture()
def out(tmp_path):
    return tmp_path


def test_shipped_spec_rows_compose():
    spec = ab.load_spec("smollm2-135m")
    names = [r["name"] for r in spec["rows"]]
    assert "baseline" in names and len(set(names)) == len(names)
    assert all(isinstance(r["loss_tokens"], int) and r["loss_tokens"] > 0 for r in spec["rows"])
    assert "${" not in spec["fixed_features"]  # interpolations resolved
    with pytest.raises(EagleError, match="no ablation spec for recipe 'nope'"):
        ab.load_spec("nope")


def test_shipped_recipe_is_its_ablation_row():
    """recipes/smollm2-135m-shipped.yaml states the settings of the row it ships (layers2-all-cosine-2400k) a second
    time, so a recipe for `make train`; composed, the two must train the same head on the same data."""
    from omegaconf import OmegaConf

    spec = ab.load_spec("smollm2-135m")
    row = next(r for r in spec["rows"] if r["name"] == "layers2-all-cosine-2400k")
    args, _ = ab.row_overrides(spec, "smollm2-135m", row)
    composed = OmegaConf.to_container(OmegaConf.merge(ab.recipe("smollm2-135m"), OmegaConf.from_dotlist(args)))
    shipped = ab.recipe("smollm2-135m-shipped")
    for group in ("model", "data", "featurize", "train", "head"):
        assert composed.get(group) == shipped.get(group), group
    assert composed["train"]["epochs"] == 5 and composed["head"]["layers"] == 2  # the row's own, over the spec's 2


def test_families_group_data_sizes():
    assert [ab.family(n) for n in ("regen-100k", "regen-300k", "baseline", "ttt3-100k", "ttt3", "eagle3-100k",
                                   "all-cosine-2400k")] == [
        "baseline", "baseline", "baseline", "ttt3", "ttt3", "eagle3", "all-cosine"]


def test_row_with_too_little_data_is_pending_not_trained(out, monkeypatch):
    monkeypatch.setattr(ab, "_loss_tokens", lambda directory: 1234)
    monkeypatch.setattr(ab, "_run", lambda *a, **k: pytest.fail("nothing may run"))
    status = ab.train_row(out, {"train": []}, "smollm2-135m", {"name": "big", "loss_tokens": 10_000, "overrides": []})
    assert status.startswith("pending") and "1234" in status and "10000" in status


def test_row_on_both_parts_counts_and_trains_on_both(out, monkeypatch):
    """A `more` row trains on the recipe's features plus the second part's (train.extra_features), and is pending
    until the two together hold its loss tokens."""
    monkeypatch.setattr(ab, "_loss_tokens", lambda directory: 600 if "part2" in str(directory) else 500)
    runs = []
    monkeypatch.setattr(ab, "_run", lambda cmd, log_path: runs.append(cmd))
    spec = {"train": [], "more_features": "smollm2-135m-part2"}
    row = {"name": "both", "loss_tokens": 1200, "overrides": ["more", "train.epochs=5"]}
    status = ab.train_row(out, spec, "smollm2-135m", row)
    assert status.startswith("pending") and "1100" in status and "part2" in status and not runs
    assert ab.train_row(out, spec, "smollm2-135m", {**row, "loss_tokens": 1100}) == "done"
    extra = [a for a in runs[0] if a.startswith("train.extra_features=")]
    assert len(extra) == 1 and "smollm2-135m-part2/train" in extra[0] and "more" not in runs[0]
    assert "train.epochs=5" in runs[0]


def test_trained_row_is_not_retrained_and_table_reads_its_summary(out, monkeypatch):
    row = {"name": "r", "loss_tokens": 100, "overrides": []}
    (out / "r").mkdir()
    summary = {"steps": 3, "train_s": 120.0, "conversations": 2, "loss_tokens": 101, "epochs": 2, "heldout/top1": 0.5,
               **{f"heldout/alpha_{k}": 0.1 * k for k in range(7)}}
    (out / "r" / "summary.json").write_text(json.dumps(summary))
    monkeypatch.setattr(ab, "_run", lambda *a, **k: pytest.fail("a trained row is not retrained"))
    assert ab.train_row(out, {"train": []}, "smollm2-135m", row) == "done"
    result = ab.row_result(out, row, "done", 1.75, 2.5)
    table = ab.write_table(out, [result, ab.row_result(out, {"name": "p"}, "pending: no data", None)])
    assert "| r | 101 | 2 | 0.500 | 0.000 | 0.100 |" in table and "| 1.75 | 2.50 | 2.0 |" in table
    assert "pending: no data" in table and (out / "table.csv").exists()
    assert ab.plot(out, [result]) is not None and (out / "tau_vs_tokens.png").exists()


def test_second_tau_decodes_the_recipes_heldout_prompts(out, monkeypatch, tmp_path):
    """τ on held-out prompts: the question set is written once by stage=heldout-questions beside the held-out
    features, then eval decodes it (bench.names=[heldout], that features directory as bench.data_dir)."""
    monkeypatch.setattr(ab, "features_dir", lambda name: tmp_path / "feats")
    runs = []

    def fake_run(cmd, log_path):
        runs.append(cmd)
        if "stage=heldout-questions" in cmd:
            (tmp_path / "feats" / "heldout").mkdir(parents=True)
            (tmp_path / "feats" / "heldout" / "question.jsonl").write_text("{}\n")

    monkeypatch.setattr(ab, "_run", fake_run)
    spec = {"eval": {"bench": "mt_bench", "questions": 10, "max_new_tokens": 128}}
    row = {"name": "r", "loss_tokens": 100, "overrides": []}
    assert ab.tau_row(out, spec, "smollm2-135m", row, ab.HELDOUT) is None  # fake runs write no records
    ab.tau_row(out, spec, "smollm2-135m", row, ab.HELDOUT)
    assert sum("stage=heldout-questions" in cmd for cmd in runs) == 1  # written once
    evals = [cmd for cmd in runs if "eval.cli" in cmd]
    assert len(evals) == 2 and "bench.names=[heldout]" in evals[0] and "run=r-tau-heldout" in evals[0]
    assert f"bench.data_dir={tmp_path / 'feats'}" in evals[0]
    ab.tau_row(out, spec, "smollm2-135m", row)
    assert "bench.names=[mt_bench]" in runs[-1] and "run=r-tau" in runs[-1]
    assert "infer.budget=fixed" in runs[-1]  # τ on the fixed tree, whatever eval's default budget


def test_unknown_row_is_one_line_error(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("EAGLE_CACHE", str(tmp_path))
    with pytest.raises(SystemExit) as exit_info:
        ab.main(["--rows", "nope"])
    assert exit_info.value.code == 2
    assert "unknown ablation row 'nope'" in capsys.readouterr().err
