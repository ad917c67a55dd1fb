"""eagle_train.training.score_head: a saved head scored on a held-out split exactly as training scores it."""
from __future__ import annotations

import pytest
import torch

from eagle_infer.head.draft_head import random_head
from eagle_infer.errors import EagleError
from eagle_train.features.featurize import FeaturizeConfig, featurize
from eagle_train.features.shards import read_samples
from eagle_train.training.score_head import score
from eagle_train.training.train import evaluate
from tests.conftest import make_tiny_smol
from tests.oracles import one_thread  # noqa: F401 (autouse)
from tests.test_train import conversations


def test_score_is_trainings_evaluation_of_the_saved_head(tiny_smol6, tmp_path):
    featurize(conversations(6), tiny_smol6, tmp_path / "heldout", FeaturizeConfig(max_length=96, shard_size=4))
    head = random_head(tiny_smol6, seed=1)
    head.save(tmp_path / "head", dtype=torch.float32)
    got = score(str(tmp_path / "head"), str(tmp_path / "heldout"), 3, target=tiny_smol6)
    want = evaluate(head, read_samples(tmp_path / "heldout", aux=False)[:3], torch.float32, torch.device("cpu"))
    assert set(got) == set(want) and "heldout/top1" in got and "heldout/alpha_6" in got
    assert got == pytest.approx(want, nan_ok=True)


def test_bad_input(tiny_smol6, smol_tok, tmp_path):
    featurize(conversations(2), tiny_smol6, tmp_path / "heldout", FeaturizeConfig(max_length=96, shard_size=4))
    with pytest.raises(EagleError, match="--conversations 0 is invalid"):
        score(str(tmp_path / "head"), str(tmp_path / "heldout"), 0, target=tiny_smol6)
    other = make_tiny_smol(smol_tok, name="other", hidden=32)
    random_head(other).save(tmp_path / "other-head")
    with pytest.raises(EagleError, match="other"):  # a head for another target, named
        score(str(tmp_path / "other-head"), str(tmp_path / "heldout"), 2, target=tiny_smol6)
