"""What the target wrote for a recipe, kept in the checkout and restored elsewhere (eagle_train.data.generated_data)."""
from __future__ import annotations

import json

import pytest

from eagle_infer.models.chat import Message
from eagle_infer.errors import EagleError
from eagle_train.cli import TrainRunConf, _kept_generated
from eagle_train.data.generated_data import restore_generated, save_generated
from eagle_train.data.regenerate import RegenerateSettings, conversations_fingerprint, regenerated_shard

SETTINGS = RegenerateSettings(fraction=1.0, turns=1, max_new_tokens=8, max_length=64)
CHUNK = [[Message("user", f"question {i}")] for i in range(3)]


def _answered_shard(features, index=0, chunk=CHUNK, settings=SETTINGS):
    """A regenerated shard as regenerated_shard writes it (answers without an engine)."""
    path = features / "regenerated" / f"shard-{index:05d}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    convs = [[("user", c[0].content), ("assistant", f"answer {i}")] for i, c in enumerate(chunk)]
    path.write_text(json.dumps({"fingerprint": conversations_fingerprint(chunk), **settings.__dict__,
                                "regenerated": len(chunk), "answer_tokens": 6, "regenerate_s": 1.0,
                                "conversations": convs}))
    return path


def test_a_fresh_machine_reads_the_kept_answers(tmp_path):
    """Save, lose the cache, restore: the shards come back byte for byte and featurize reads them without
    answering anything (no engine); a second save writes nothing and the copies carry no timestamp."""
    root, kept = tmp_path / "cache", tmp_path / "kept"
    features, prompts = root / "features" / "r", root / "features" / "r" / "self-prompts"
    shards = [_answered_shard(features / "train"), _answered_shard(features / "heldout", 0)]
    prompts.mkdir(parents=True)
    shards.append(prompts / "shard-00000.json")
    shards[-1].write_text(json.dumps({"kept": ["Write a poem"]}))
    original = {p: p.read_bytes() for p in shards}

    written = save_generated(features, prompts, kept, root)
    assert sorted(p.relative_to(kept).as_posix() for p in written) == [
        "features/r/heldout/regenerated/shard-00000.json.gz", "features/r/self-prompts/shard-00000.json.gz",
        "features/r/train/regenerated/shard-00000.json.gz"]
    assert save_generated(features, prompts, kept, root) == []
    again = tmp_path / "again"
    save_generated(features, prompts, again, root)
    assert all((again / p.relative_to(kept)).read_bytes() == p.read_bytes() for p in written)
    assert all(p.read_bytes()[4:8] == bytes(4) for p in written)  # gzip's MTIME field

    for p in shards:
        p.unlink()
    assert sorted(restore_generated(features, prompts, kept, root)) == sorted(shards)
    assert {p: p.read_bytes() for p in shards} == original
    convs, info = regenerated_shard(CHUNK, 0, features / "train", None, SETTINGS, batch_size=1)
    assert [c[1].content for c in convs] == ["answer 0", "answer 1", "answer 2"] and info["regenerate_s"] == 0.0


def test_restore_leaves_existing_files_and_checks_what_it_restored(tmp_path):
    """A file already there is never overwritten; a kept copy made with other settings is refused on reading, in one
    line naming the setting."""
    root, kept = tmp_path / "cache", tmp_path / "kept"
    features = root / "features" / "r"
    path = _answered_shard(features / "train")
    save_generated(features, None, kept, root)
    path.write_text("local")
    assert restore_generated(features, None, kept, root) == [] and path.read_text() == "local"
    path.unlink()
    restore_generated(features, None, kept, root)
    other = RegenerateSettings(fraction=1.0, turns=1, max_new_tokens=16, max_length=64)
    with pytest.raises(EagleError, match="max_new_tokens=8, not 16"):
        regenerated_shard(CHUNK, 0, features / "train", None, other, batch_size=1)


def test_directories_outside_the_cache_root(tmp_path):
    """Saving names the directory and the cache root; restoring has nothing to restore there."""
    with pytest.raises(EagleError, match="is not under the cache root"):
        save_generated(tmp_path / "elsewhere", None, tmp_path / "kept", tmp_path / "cache")
    assert restore_generated(tmp_path / "elsewhere", None, tmp_path / "kept", tmp_path / "cache") == []


def test_the_stages_save_and_restore_the_recipes_directories(tmp_path, monkeypatch):
    """stage=save-generated writes under data.generated_dir; a generating stage restores from it; with
    data.generated_dir null, save-generated is a one-line error."""
    monkeypatch.setenv("EAGLE_CACHE", str(tmp_path / "cache"))
    conf = TrainRunConf()
    conf.data.features_dir = str(tmp_path / "cache" / "features" / "r")
    conf.data.generated_dir = str(tmp_path / "kept")
    path = _answered_shard(tmp_path / "cache" / "features" / "r" / "heldout")
    conf.stage = "save-generated"
    _kept_generated(conf)
    assert (tmp_path / "kept" / "features" / "r" / "heldout" / "regenerated" / "shard-00000.json.gz").is_file()
    path.unlink()
    conf.stage = "featurize"
    _kept_generated(conf)
    assert path.is_file()
    conf.stage, conf.data.generated_dir = "save-generated", None
    with pytest.raises(EagleError, match="needs data.generated_dir"):
        _kept_generated(conf)
