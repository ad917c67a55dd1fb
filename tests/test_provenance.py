"""eagle_train.plumbing.provenance: the commit a result is stamped with, and paths printed the same on every machine."""
from __future__ import annotations

import subprocess

import pytest

from eagle_infer.errors import EagleError
from eagle_train.plumbing.provenance import checkout_commit, shown_path


def test_a_path_under_the_cache_root_is_printed_relative_to_it(monkeypatch, tmp_path):
    monkeypatch.setenv("EAGLE_CACHE", str(tmp_path / "cache"))
    assert shown_path(tmp_path / "cache" / "features" / "r" / "self-prompts") == "<cache root>/features/r/self-prompts"
    assert shown_path(tmp_path / "elsewhere") == str(tmp_path / "elsewhere")


def test_checkout_commit_sees_changes_outside_the_excluded_paths(tmp_path):
    with pytest.raises(EagleError, match="is not a git checkout"):
        checkout_commit(tmp_path)
    git = lambda *a: subprocess.run(["git", "-C", str(tmp_path), *a], check=True, capture_output=True)  # noqa: E731
    git("init", "-q")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
    commit, changed = checkout_commit(tmp_path)
    assert len(commit) >= 7 and not changed
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "result.md").write_text("new\n")
    assert checkout_commit(tmp_path, exclude=("docs",)) == (commit, False) and checkout_commit(tmp_path)[1]
