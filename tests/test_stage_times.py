"""stage_times reads the seconds each shard recorded; a shard without a time is counted but not timed."""
import json

import pytest

from eagle_infer.errors import EagleError
from eagle_train.data.stage_times import stage_times, table


def _write(path, record):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))


def test_stage_times_counts_zero_second_shards_and_skips_untimed(tmp_path):
    machine = {"machine": "CPU X", "threads": 2}
    _write(tmp_path / "train" / "shard-00000.json", {"tokens": 100, "forward_s": 0.0, **machine})  # tiny: rounds to 0
    _write(tmp_path / "train" / "shard-00001.json", {"tokens": 300, "forward_s": 2.0, **machine})
    _write(tmp_path / "heldout" / "shard-00000.json", {"tokens": 50})  # written before times were recorded
    _write(tmp_path / "train" / "regenerated" / "shard-00000.json", {"answer_tokens": 40, "regenerate_s": 4.0, **machine})
    times = {t.stage: t for t in stage_times(tmp_path)}
    assert set(times) == {"regenerate", "forward"}  # no self-prompts shard: stage left out
    forward = times["forward"]
    assert (forward.shards, forward.timed, forward.units, forward.seconds) == (3, 2, 400, 2.0)
    assert forward.rate == 200 and forward.machine == "CPU X, 2 threads"
    assert times["regenerate"].rate == 10
    assert "2 of 3" in table(list(times.values()))


def test_stage_times_gives_each_machine_its_own_figure(tmp_path):
    """Shards written on two machines: two entries, each with its own seconds and units, never one sum."""
    for i, (machine, seconds) in enumerate([("CPU X", 100.0), ("GPU Y", 10.0), ("CPU X", 300.0)]):
        _write(tmp_path / "self-prompts" / f"shard-{i:05d}.json",
               {"sampled": 256, "seconds": seconds, "machine": machine, "threads": 2})
    _write(tmp_path / "self-prompts" / "shard-00003.json", {"sampled": 256})  # untimed
    times = stage_times(tmp_path)
    assert [(t.machine, t.shards, t.timed, t.seconds, t.units) for t in times] == [
        ("CPU X, 2 threads", 4, 2, 400.0, 512), ("GPU Y, 2 threads", 4, 1, 10.0, 256)]


def test_stage_times_reports_an_untimed_stage_once(tmp_path):
    _write(tmp_path / "train" / "shard-00000.json", {"tokens": 50})
    assert [(t.stage, t.shards, t.timed, t.machine) for t in stage_times(tmp_path)] == [("forward", 1, 0, "")]


def test_stage_times_names_a_missing_directory(tmp_path):
    with pytest.raises(EagleError, match="does not exist"):
        stage_times(tmp_path / "nope")


def test_stage_times_counts_only_the_prompt_shards_the_data_used(tmp_path):
    """Prompt shards written later for further parts of the data (here on another machine) are not the data's: with
    `prompts`, only the shards holding the first that many kept prompts are timed."""
    for i, machine in enumerate(["CPU X", "CPU X", "GPU Y"]):
        _write(tmp_path / "self-prompts" / f"shard-{i:05d}.json",
               {"sampled": 4, "kept": ["a", "b", "c"], "seconds": 1.0, "machine": machine, "threads": 2})
    assert [(t.machine, t.shards) for t in stage_times(tmp_path, prompts=4)] == [("CPU X, 2 threads", 2)]
    assert [(t.machine, t.shards) for t in stage_times(tmp_path, prompts=3)] == [("CPU X, 2 threads", 1)]
    assert len(stage_times(tmp_path)) == 2 and len(stage_times(tmp_path, prompts=100)) == 2
