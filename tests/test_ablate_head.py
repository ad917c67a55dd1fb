"""make ablate-head's driver: spec checks, pending rows, resumed rows, the table, families for the plot."""
from __future__ import annotations

import json

import pytest

import lab.ablate_head as ab
from eagle_infer.decoding.build import SHIPPED_HEADS_DIR
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


def test_bad_rows_are_one_line_errors(monkeypatch, tmp_path):
    """A row key the driver does not read, or a recipe name that is not in recipes/, is refused naming it."""
    row = {"name": "r", "loss_tokens": 1, "self_features": "smollm2-135m-nope", "overrides": ["self-only"]}
    with pytest.raises(EagleError, match="unknown recipe 'smollm2-135m-nope'"):
        ab.row_overrides({"self_more_features": "smollm2-135m-self-openers-part2"}, "smollm2-135m", row)
    (tmp_path / "conf" / "ablate").mkdir(parents=True)
    (tmp_path / "conf" / "ablate" / "bad.yaml").write_text(
        "rows:\n  - {name: r, loss_tokens: 1, overrides: [], self_feature: x}\n")
    monkeypatch.setattr(ab, "REPO", tmp_path)
    with pytest.raises(EagleError, match=r"row 'r' has unknown keys \['self_feature'\]"):
        ab.load_spec("bad")


@pytest.mark.parametrize("finding, message", [
    ("{claim: c, section: eagle3, effect: best, paper: stated, rows: [r, s]}",
     "finding 'c' has effect 'best': expected one of gain, difference, keeps_rising"),
    ("{claim: c, section: eagle3, effect: gain, paper: stated, rows: [r, gone]}",
     r"finding 'c' has rows \['r', 'gone'\]: expected two of r, s"),
    ("{claim: c, section: eagle3, effect: gain, paper: 'EAGLE-3 Table 2: eagle2 → eagle9', rows: [r, s]}",
     r"finding 'c' has paper 'EAGLE-3 Table 2: eagle2 → eagle9': expected one of stated"),
    ("{claim: c, section: table9, effect: gain, paper: stated, rows: [r, s]}", "has section 'table9'"),
    ("{claim: c, section: eagle3, effect: gain, paper: stated, rows: [r, s], figure: speed}", "has figure 'speed'"),
    ("{claim: c, section: eagle3, effect: keeps_rising, paper: stated, small: [r, s]}",
     r"finding 'c' has keys \['claim', 'effect', 'paper', 'section', 'small'\]: expected \['claim', 'effect', "
     r"'large', 'paper', 'section', 'small'\] for keeps_rising"),
    ("{claim: c, section: eagle3, effect: difference, paper: stated, rows: [r, s], labels: [a]}",
     r"has labels \['a'\]: expected two labels"),
    ("{claim: c, section: eagle3, effect: gain, paper: stated, rows: [r, s], rule: most}", "has rule 'most'"),
    ("{claim: c, section: eagle3, effect: gain, paper: 'stated: about the same', rows: [r, s], rule: near}",
     "has rule near and tolerance None: expected a tolerance exactly with rule near"),
    ("{claim: c, section: eagle3, effect: gain, paper: stated, rows: [r, s], rule: at_most}",
     "has rule at_most against 'stated', which has no figure"),
])
def test_findings_name_a_rule_the_paper_and_rows_of_the_spec(monkeypatch, tmp_path, finding, message):
    """The findings a spec declares (which rows, which figure, which published effect, which rule) are checked on
    load."""
    (tmp_path / "conf" / "ablate").mkdir(parents=True)
    (tmp_path / "conf" / "ablate" / "f.yaml").write_text(
        "rows:\n  - {name: r, loss_tokens: 1, overrides: []}\n  - {name: s, loss_tokens: 1, overrides: []}\n"
        f"findings:\n  - {finding}\n")
    monkeypatch.setattr(ab, "REPO", tmp_path)
    with pytest.raises(EagleError, match=message):
        ab.load_spec("f")


def test_every_row_a_declared_finding_names_is_a_row_of_its_spec():
    """conf/ablate/*.yaml: each spec's findings (lab.declared_findings) name rows the spec trains, so a renamed row
    cannot leave a finding reading nothing; every section reading ablation rows has its findings."""
    from lab.declared_findings import SECTIONS, declared

    sections = set()
    for path in sorted((ab.REPO / "conf" / "ablate").glob("*.yaml")):
        spec = ab.load_spec(path.stem)
        names = {r["name"] for r in spec["rows"]}
        for section in SECTIONS:
            for finding in declared(spec, section):
                assert set(finding.named_rows) <= names, (path.name, finding.claim)
                sections.add(section)
    assert sections == set(SECTIONS)


def test_shipped_recipe_is_its_ablation_row():
    """recipes/smollm2-135m-shipped.yaml states the settings of the row it ships (the shipped head's card names it) a
    second time, so a recipe for `make train`; composed, the two must train the same head on the same data."""
    card = json.loads((SHIPPED_HEADS_DIR / "smollm2-135m" / "card.json").read_text())
    spec = ab.load_spec("smollm2-135m")
    [row] = ab.named_rows(spec, [card["ablation_row"]])
    composed = ab.recipe("smollm2-135m", ab.row_overrides(spec, "smollm2-135m", row)[0])
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


def test_featurize_makes_a_pending_rows_data_first(out, monkeypatch):
    """With featurize=True a row short of loss tokens featurizes the recipes of its directories (both parts of a
    `more` row), then trains; still short afterwards, it stays pending; never featurizes a row that has its data."""
    made = set()
    monkeypatch.setattr(ab, "_loss_tokens", lambda directory: 600 if directory.parent.name in made else 100)
    runs = []

    def run(cmd, log_path):
        runs.append(cmd)
        if "stage=featurize" in cmd:
            made.add(cmd[cmd.index("stage=featurize") - 1].removeprefix("recipes="))

    monkeypatch.setattr(ab, "_run", run)
    monkeypatch.setattr(ab, "heldout_missing", lambda name: False)
    spec = {"train": [], "more_features": "smollm2-135m-part2"}
    row = {"name": "both", "loss_tokens": 1200, "overrides": ["more"]}
    assert ab.train_row(out, spec, "smollm2-135m", row).startswith("pending") and not runs  # not asked to
    assert ab.train_row(out, spec, "smollm2-135m", row, featurize=True) == "done"
    assert [c[-2:] for c in runs[:2]] == [["recipes=smollm2-135m", "stage=featurize"],
                                          ["recipes=smollm2-135m-part2", "stage=featurize"]]
    assert "stage=train" in runs[2]
    assert ab.train_row(out, spec, "smollm2-135m", {**row, "name": "big", "loss_tokens": 1201},
                        featurize=True).startswith("pending")
    runs.clear()
    assert ab.train_row(out, spec, "smollm2-135m", {**row, "name": "small"}, featurize=True) == "done"
    assert not any("stage=featurize" in c for c in runs)


def test_featurize_makes_the_recipes_heldout_split_for_a_row_that_reads_none_of_its_data(out, monkeypatch):
    """A self-only row trains on the self-written parts alone but is scored during training on the recipe's held-out
    split: with featurize=True and that split missing, the recipe is featurized as far as its split and one train
    shard (featurize.max_shards=1) before training; without featurize nothing runs but the training."""
    monkeypatch.setattr(ab, "_loss_tokens", lambda directory: 700)
    runs = []
    monkeypatch.setattr(ab, "_run", lambda cmd, log_path: runs.append(cmd))
    monkeypatch.setattr(ab, "heldout_missing", lambda name: name == "smollm2-135m")
    spec = {"train": [], "self_features": "smollm2-135m-self-openers",
            "self_more_features": "smollm2-135m-self-openers-part2"}
    row = {"name": "self100", "loss_tokens": 1400, "overrides": ["self-only", "more"]}
    assert ab.train_row(out, spec, "smollm2-135m", row, featurize=True) == "done"
    assert runs[0][-3:] == ["recipes=smollm2-135m", "stage=featurize", "featurize.max_shards=1"]
    assert "stage=train" in runs[1] and len(runs) == 2
    runs.clear()
    assert ab.train_row(out, spec, "smollm2-135m", {**row, "name": "again"}) == "done"
    assert len(runs) == 1 and "stage=train" in runs[0]


def test_self_rows_take_equal_shares_of_two_directories(out, monkeypatch):
    """`self`: the recipe's features and the self-written prompts' in equal shares of the row's loss tokens;
    `self-only` the self-written prompts alone, with `more` their two parts alike (with `self`, both sources' two
    parts, four equal shares); a row's own `self_features` names
    the self-written recipe and its `self_more_features` further parts. Pending until the smaller directory holds
    its share."""
    monkeypatch.setattr(ab, "_loss_tokens", lambda directory: 700 if "self" in str(directory) else 500)
    runs = []
    monkeypatch.setattr(ab, "_run", lambda cmd, log_path: runs.append(cmd))
    spec = {"train": [], "self_features": "smollm2-135m-self", "self_more_features": "smollm2-135m-self-openers-part2",
            "more_features": "smollm2-135m-part2"}
    half = {"name": "half", "loss_tokens": 1200, "overrides": ["self"]}
    assert ab.train_row(out, spec, "smollm2-135m", half).startswith("pending") and not runs  # 2 x 500 < 1200
    assert ab.train_row(out, spec, "smollm2-135m", {**half, "loss_tokens": 1000}) == "done"
    assert "train.equal_shares=true" in runs[0] and not any(a.startswith("train.features_dir=") for a in runs[0])
    assert [a for a in runs[0] if a.startswith("train.extra_features=")][0].endswith("smollm2-135m-self/train]")
    both = {"name": "both", "loss_tokens": 1400, "overrides": ["self-only", "more"]}
    assert ab.train_row(out, spec, "smollm2-135m", both) == "done"
    assert any(a.startswith("train.features_dir=") and a.endswith("smollm2-135m-self/train") for a in runs[1])
    extra = [a for a in runs[1] if a.startswith("train.extra_features=")][0]
    assert extra.endswith("smollm2-135m-self-openers-part2/train]")
    assert "train.equal_shares=true" in runs[1]
    only = {"name": "only", "loss_tokens": 700, "self_features": "smollm2-135m-self-pilot", "overrides": ["self-only"]}
    assert ab.train_row(out, spec, "smollm2-135m", {**only, "loss_tokens": 701}).startswith("pending")
    assert ab.train_row(out, spec, "smollm2-135m", only) == "done"
    assert any(a.startswith("train.features_dir=") and a.endswith("smollm2-135m-self-pilot/train") for a in runs[2])
    assert not any(a.startswith(("train.extra_features=", "train.equal_shares")) for a in runs[2])
    parts = ["smollm2-135m-self-openers-part2", "smollm2-135m-self-openers-part3"]  # a row's own further parts
    three = {"name": "three", "loss_tokens": 2100, "self_more_features": parts, "overrides": ["self-only", "more"]}
    assert ab.train_row(out, spec, "smollm2-135m", three) == "done"
    assert _extra_recipes(runs[3]) == parts
    assert "train.equal_shares=true" in runs[3]
    mixed = {"name": "mixed", "loss_tokens": 2000, "overrides": ["self", "more"]}  # both sources' two parts
    assert ab.train_row(out, spec, "smollm2-135m", {**mixed, "loss_tokens": 2001}).startswith("pending")  # 4 x 500
    assert ab.train_row(out, spec, "smollm2-135m", mixed) == "done"
    assert _extra_recipes(runs[4]) == ["smollm2-135m-part2", "smollm2-135m-self", "smollm2-135m-self-openers-part2"]
    assert "train.equal_shares=true" in runs[4]
    with pytest.raises(EagleError, match="row 'mixed': `self` with `more` needs self_more_features"):
        ab.row_overrides({**spec, "self_more_features": []}, "smollm2-135m", mixed)


def _extra_recipes(cmd: list[str]) -> list[str]:
    """The recipe names of a training command's train.extra_features directories (<features>/<recipe>/train)."""
    [extra] = [a for a in cmd if a.startswith("train.extra_features=")]
    return [p.split("/")[-2] for p in extra[len("train.extra_features=["):-1].split(",")]


def test_trained_row_is_not_retrained_and_table_reads_its_summary(out, monkeypatch):
    row = {"name": "r", "loss_tokens": 100, "overrides": []}
    (out / "r").mkdir()
    summary = {"steps": 3, "train_s": 120.0, "conversations": 2, "loss_tokens": 101, "epochs": 2, "heldout/top1": 0.5,
               **{f"heldout/alpha_{k}": 0.1 * k for k in range(6)}, "heldout/alpha_6": float("nan")}  # no tries
    (out / "r" / "summary.json").write_text(json.dumps(summary))
    monkeypatch.setattr(ab, "_run", lambda *a, **k: pytest.fail("a trained row is not retrained"))
    assert ab.train_row(out, {"train": []}, "smollm2-135m", row) == "done"
    result = ab.row_result(out, row, "done", 1.75, 2.5)
    table = ab.write_table(out, [result, ab.row_result(out, {"name": "p"}, "pending: no data", None)])
    assert "| r | 101 | 2 | 0.500 | 0.000 | 0.100 |" in table and "| 0.500 | – | 1.75 | 2.50 | – | – | 2.0 |" in table
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


def test_speed_column_is_eagle2_over_vanilla_from_one_run(out, monkeypatch):
    """The speed column: one eval run of vanilla and EAGLE-2 (defaults) with the row's head; the ratio of their
    tok/s over the same questions, and the CPU it ran on."""
    from eval.records import RecordWriter
    from tests.test_eval_metrics import record

    def fake_run(cmd, log_path):
        assert "methods=[vanilla,eagle2]" in cmd and "run=r-speed" in cmd and not any("budget" in a for a in cmd)
        writer = RecordWriter(out / "r-speed" / "records.jsonl")
        for q in range(2):
            writer.append(record("mt_bench", "vanilla", str(q), 100, 4.0, list(range(100))))
            writer.append(record("mt_bench", "eagle2", str(q), 100, 2.5, list(range(100))))

    monkeypatch.setattr(ab, "_run", fake_run)
    spec = {"eval": {"bench": "mt_bench", "questions": 2, "max_new_tokens": 128}}
    row = {"name": "r", "loss_tokens": 100, "overrides": []}
    speed = ab.speed_row(out, spec, "smollm2-135m", row)
    assert speed["speedup"] == pytest.approx(1.6) and speed["speed_cpu"]
    monkeypatch.setattr(ab, "_run", lambda *a, **k: pytest.fail("complete speed records are not rerun"))
    assert ab.speed_row(out, spec, "smollm2-135m", row) == speed
    table = ab.write_table(out, [ab.row_result(out, row, "done", 1.75, 2.5, speed)])
    assert f"| 1.60 | {speed['speed_cpu']} |" in table


def test_unknown_row_is_one_line_error(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("EAGLE_CACHE", str(tmp_path))
    with pytest.raises(SystemExit) as exit_info:
        ab.main(["rows=[nope]"])
    assert exit_info.value.code == 2
    assert "unknown ablation row 'nope'" in capsys.readouterr().err


def test_other_spec_runs_its_recipe_with_its_questions_and_skips_heldout_tau(monkeypatch, tmp_path):
    """spec=draft-inputs: conf/ablate/draft-inputs.yaml's rows (the four draft inputs of EAGLE's Figure 8, trained
    alike, and the fixed-data row), trained with the recipe it names, under <cache root>/ablate-draft-inputs;
    questions=N sets every τ and speed run's questions; eval.heldout: false measures no held-out τ."""
    from eagle_infer.head.draft_head import INPUT_MODES

    spec = ab.load_spec("draft-inputs")
    modes = [a.split("=", 1)[1] for r in spec["rows"] for a in r["overrides"] if a.startswith("train.input_mode=")]
    assert sorted(modes) == sorted(INPUT_MODES) and len({r["loss_tokens"] for r in spec["rows"]}) == 1
    monkeypatch.setenv("EAGLE_CACHE", str(tmp_path))
    calls = []
    monkeypatch.setattr(ab, "train_row", lambda out, spec, name, row, *_: calls.append(("train", out, name)) or "done")
    monkeypatch.setattr(ab, "tau_row", lambda out, spec, name, row, bench="": calls.append(
        ("tau", bench, spec["eval"]["questions"])) or 1.5)
    monkeypatch.setattr(ab, "speed_row", lambda out, spec, name, row: {"speedup": 1.1, "speed_cpu": "cpu"})
    ab.main(["spec=draft-inputs", "rows=[input-token-200k]", "questions=2", f"results_root={tmp_path}"])
    assert calls == [("train", tmp_path / "ablate-draft-inputs", "smollm2-135m"), ("tau", "", 2)]
    assert "| input-token-200k |" in (tmp_path / "ablate-draft-inputs" / "table.md").read_text()


def test_conversations_file_replaces_the_sharegpt_package_in_featurize(out, monkeypatch, tmp_path):
    """conversations=FILE (a lent GPU has no ShareGPT package): featurize of a recipe reading the package reads the file
    instead; a recipe of self-written prompts is featurized as it is; a missing file is a one-line error."""
    conversations = tmp_path / "conversations.jsonl"
    conversations.write_text("")
    assert ab.featurize_command("smollm2-135m")[-2:] == ["recipes=smollm2-135m", "stage=featurize"]
    assert ab.featurize_command("smollm2-135m-part2", str(conversations))[-1] == f"data.source={conversations}"
    assert not any(a.startswith("data.source=") for a in ab.featurize_command("smollm2-135m-self", str(conversations)))
    with pytest.raises(EagleError, match="conversations='/no/such.jsonl' does not exist"):
        ab.featurize_command("smollm2-135m", "/no/such.jsonl")
    runs = []
    monkeypatch.setattr(ab, "_loss_tokens", lambda directory: 1000 if runs else 0)
    monkeypatch.setattr(ab, "_run", lambda cmd, log_path: runs.append(cmd))
    monkeypatch.setattr(ab, "heldout_missing", lambda name: False)
    row = {"name": "r", "loss_tokens": 1000, "overrides": []}
    assert ab.train_row(out, {"train": []}, "smollm2-135m", row, True, str(conversations)) == "done"
    assert f"data.source={conversations}" in runs[0] and "stage=train" in runs[1]
    assert runs[1][1:3] == ["-m", "deepspeed.launcher.runner"]  # the launcher as a module: no script on PATH needed


def test_train_only_trains_measures_nothing_and_records_nothing(monkeypatch, tmp_path):
    """train_only=true (a lent GPU's short time): the rows train, no τ or speed run starts, and neither the committed
    ablation file nor the curves change; the table shows the trained row."""
    monkeypatch.setenv("EAGLE_CACHE", str(tmp_path))
    trained = []

    def train(out, spec, name, row, featurize, conversations):
        trained.append((row["name"], featurize, conversations))
        (out / row["name"]).mkdir(parents=True)
        (out / row["name"] / "summary.json").write_text(json.dumps({"loss_tokens": 5, "train_s": 60.0}))
        return "done"

    monkeypatch.setattr(ab, "train_row", train)
    monkeypatch.setattr(ab, "tau_row", lambda *a, **k: pytest.fail("--train-only measures no τ"))
    monkeypatch.setattr(ab, "speed_row", lambda *a, **k: pytest.fail("--train-only measures no speed"))
    monkeypatch.setattr(ab, "record_rows", lambda *a, **k: pytest.fail("--train-only records no row"))
    monkeypatch.setattr(ab, "record_curves", lambda *a, **k: pytest.fail("--train-only records no curve"))
    ab.main(["rows=[eagle3-block-k7-300k]", "train_only=true", "featurize=true", "conversations=c.jsonl",
             f"results_root={tmp_path}"])
    assert trained == [("eagle3-block-k7-300k", True, "c.jsonl")]
    assert "| eagle3-block-k7-300k | 5 |" in (tmp_path / "ablate-head" / "table.md").read_text()


def test_row_settings_compose_a_rows_training_and_head_settings():
    """What scripts/bench_train_step.py times is each row as make ablate-head trains it, not a restatement."""
    train, head = ab.row_settings("smollm2-135m", "eagle3-block-k7-2400k")
    assert (head.block, head.features, head.layers) == ("eagle3", "fused", 1)
    assert (train.ttt_steps, train.w_reg, train.draftable_only, train.max_loss_tokens) == (6, 0.0, True, 2400000)
    train, head = ab.row_settings("smollm2-135m", "ttt3-layers2-2400k")
    assert (head.block, head.layers, train.ttt_steps, train.epochs) == ("eagle", 2, 3, 5)
    with pytest.raises(EagleError, match="unknown ablation row 'nope': expected some of regen-100k"):
        ab.row_settings("smollm2-135m", "nope")
