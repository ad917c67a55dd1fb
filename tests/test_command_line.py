"""Every command with settings takes them in one style, Hydra overrides onto conf/command/<name>.yaml, typed by the
command's dataclass; a bad setting is one line naming it and the command's keys."""
from __future__ import annotations

import importlib
import json
from dataclasses import fields

import pytest

from eagle_infer.errors import EagleError
from eagle_train.plumbing.command_line import COMMAND_DIR, command_settings
from eval.identical import IdenticalSettings, main as identical_main
from eval.merge import MergeSettings

# module -> (config name, settings dataclass)
COMMANDS = {"eval.identical": ("identical", "IdenticalSettings"), "eval.merge": ("merge", "MergeSettings"),
            "eval.sweep": ("sweep", "SweepSettings"), "lab.results_docs": ("results_docs", "DocsSettings"),
            "lab.ship_head": ("ship_head", "ShipSettings"), "lab.headline": ("headline", "HeadlineSettings"),
            "lab.reproduce": ("reproduce", "ReproduceSettings"), "lab.ablate_head": ("ablate_head", "AblateSettings"),
            "eagle_train.data.stage_times": ("stage_times", "StageTimesSettings"),
            "eagle_train.training.score_head": ("score_head", "ScoreSettings")}


@pytest.mark.parametrize("module", COMMANDS)
def test_each_commands_config_holds_exactly_its_settings(module):
    name, schema = COMMANDS[module]
    keys = [line.split(":")[0] for line in (COMMAND_DIR / f"{name}.yaml").read_text().splitlines()
            if line and not line.startswith("#")]
    assert keys == [f.name for f in fields(getattr(importlib.import_module(module), schema))]


def test_settings_take_hydra_overrides_typed_by_the_dataclass():
    assert command_settings("identical", IdenticalSettings, ["run_dir=results/x", "label=float32 greedy"]) == (
        IdenticalSettings("results/x", "float32 greedy"))
    assert command_settings("identical", IdenticalSettings, ["run_dir=r"]).label == "greedy"  # the file's default
    assert command_settings("merge", MergeSettings, ["out=o", "runs=[a,b]"]).runs == ["a", "b"]


@pytest.mark.parametrize("argv, message", [
    (["run_dir=x", "lable=y"], "run_dir=x lable=y: Could not override 'lable'"),
    ([], "no settings: .*missing mandatory value: run_dir"),
    (["run_dir=[x"], "run_dir=\\[x: "),
])
def test_a_bad_setting_is_one_line_naming_the_keys(argv, message):
    with pytest.raises(EagleError, match=message) as err:
        command_settings("identical", IdenticalSettings, argv)
    assert "\n" not in str(err.value) and "conf/command/identical.yaml (run_dir, label)" in str(err.value)


def test_a_command_prints_a_bad_setting_as_one_line_and_exits_2(capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        identical_main([f"run_dir={tmp_path}", "labl=x"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith("error: ") and err.count("\n") == 1
    (tmp_path / "records.jsonl").write_text("".join(json.dumps(
        {"benchmark": "b", "question_id": 1, "method": m, "tokens": [1, 2]}) + "\n" for m in ("vanilla", "eagle2")))
    identical_main([f"run_dir={tmp_path}", "label=float32 greedy"])
    assert capsys.readouterr().out == "float32 greedy: eagle2 = vanilla on 1/1 answers\n"
