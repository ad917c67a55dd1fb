"""Training on several ranks: 2 CPU processes started by DeepSpeed's launcher (gloo), as `make train NGPU=2` starts
them, train on the global batches one rank of twice the micro batch trains on, to the same losses and weights; a
rank killed mid-run and the run started again resumes from the last checkpoint, each rank's seen-rank<r>.jsonl
showing every micro batch once.

Tolerance: losses rel 1e-5, weights atol 2e-4 (tests.test_train.assert_same_weights: float32 CPU kernels round
differently from call to call; the two ranks' gradients are also summed in another order than one rank's). No input
noise: it is drawn per micro batch. DeepSpeed averages the ranks' gradients, each the mean over its own loss tokens: that is one rank's mean
over the global batch when every rank's micro batch holds as many loss tokens, so these conversations are all of one
length and one loss mask (asserted)."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from eagle_infer.models.chat import Message, loss_mask, render
from eagle_train.features.featurize import featurize
from eagle_train.launch import accelerator_env, free_port
from eagle_train.training.train import TrainConfig, micro_batches, train
from tests.test_train import FEAT, assert_same_weights
from tests.test_train_states import LOSS_TOLERANCE, config, curve

pytestmark = pytest.mark.slow  # two launched ranks a test, and a killed one restarted

REPO = Path(__file__).resolve().parent.parent
COLOURS = ["red", "green", "blue", "yellow", "black", "white", "gray", "brown", "orange", "gold", "purple"]
N = 16  # training conversations: 4 global batches of 4 an epoch
LAUNCHER_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def equal_conversations(n: int) -> list[list[Message]]:
    """n distinct chats of one token length and loss mask: two colours (one token each) repeated in turn."""
    out = []
    for i in range(n):
        a, b = COLOURS[i % len(COLOURS)], COLOURS[(3 * i + 1) % len(COLOURS)]
        out.append([Message("user", f"Repeat {a} and {b}."), Message("assistant", " ".join([a, b] * 5))])
    return out


@pytest.fixture(scope="module")
def dirs(tmp_path_factory, tiny_smol):
    root, convs = tmp_path_factory.mktemp("ranks"), equal_conversations(N)
    masks = {tuple(loss_mask(tiny_smol.tokenizer, render(c, tiny_smol.tokenizer, "tokenizer", False), None)[1])
             for c in convs}
    assert len(masks) == 1  # one length, one loss mask: each rank's micro batch holds as many loss tokens
    feat = dataclasses.replace(FEAT, store_dtype="float32")
    for kind, states in (("offline", True), ("tokens", False)):
        featurize(convs, tiny_smol, root / kind / "train", feat, states=states)
    return {"offline": root / "offline", "tokens": root / "tokens"}


def launch(runs: list[dict], ranks: int = 2) -> subprocess.CompletedProcess:
    """tests/ranks_train.py on `ranks` CPU processes under DeepSpeed's launcher."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_ENV}
    env.update(accelerator_env(), PYTHONPATH=str(REPO))
    # the launcher's module under this interpreter (not the `deepspeed` script's shebang): the ranks then import
    # DeepSpeed from the same path as this process and reuse its compiled CPU extensions instead of rebuilding them
    command = [sys.executable, "-m", "deepspeed.launcher.runner", "--num_gpus", str(ranks), "--no_local_rank",
               "--master_port", str(free_port()), str(REPO / "tests" / "ranks_train.py"), json.dumps(runs)]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


def seen(out_dir: Path, rank: int) -> list[tuple]:
    lines = (out_dir / f"seen-rank{rank}.jsonl").read_text().splitlines()
    return [(r["epoch"], r["position"], r["samples"]) for r in map(json.loads, lines)]


# 6 steps over 2 epochs, a checkpoint at step 3; no input noise (drawn per micro batch: the same distribution, not
# the same values, when a global batch is split otherwise)
RUN = dict(heldout=None, max_steps=6, save_every=3, noise=0.0)


def run_config(dirs, mode, out_dir, **over) -> dict:
    return dataclasses.asdict(config(dirs, mode, out_dir, **RUN, **over))


@pytest.fixture(scope="module")
def one_rank(dirs, tiny_smol, deepspeed_cpu_env, tmp_path_factory) -> dict[str, Path]:
    """The reference runs, offline and online: one rank of micro batch 4 (twice the ranks' micro batch), trained
    once for the module's tests."""
    root = tmp_path_factory.mktemp("one-rank")
    for mode in ("offline", "online"):
        train(config(dirs, mode, root / mode, **RUN, batch_size=4), tiny_smol)
    return {mode: root / mode for mode in ("offline", "online")}


def test_two_ranks_train_what_one_rank_trains(dirs, one_rank, deepspeed_cpu_env, tmp_path):
    """Offline and online: 2 ranks of micro batch 2 against 1 rank of 4, 6 steps over 2 epochs."""
    modes = ("offline", "online")
    proc = launch([{"config": run_config(dirs, mode, tmp_path / f"two-{mode}")} for mode in modes])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for mode in modes:
        one, two = one_rank[mode], tmp_path / f"two-{mode}"
        assert curve(two) == pytest.approx(curve(one), **LOSS_TOLERANCE), mode
        assert_same_weights(two, one)
        for (e0, p0, s0), (e1, p1, s1), (e, p, s) in zip(seen(two, 0), seen(two, 1), seen(one, 0), strict=True):
            assert (e0, p0) == (e1, p1) == (e, p) and s0 + s1 == s  # the same global batch, split between ranks


def test_killed_rank_resumes_without_repeating_or_skipping(dirs, one_rank, deepspeed_cpu_env, tmp_path):
    """Rank 1 dies in its 5th micro batch (after the step-3 checkpoint); the launcher ends rank 0; the rerun resumes
    at step 3: every rank's audit holds each of its micro batches once, in order, and the weights are those of an
    uninterrupted run (one rank of twice the micro batch)."""
    out = tmp_path / "two"
    cfg = run_config(dirs, "offline", out)
    crashed = launch([{"config": cfg, "crash_at": 5, "crash_rank": 1}])
    assert crashed.returncode != 0
    assert (out / "checkpoints" / "latest").read_text().strip() == "step3"
    assert [p for _, p, _ in seen(out, 1)] == [0, 1, 2, 3]  # the 5th (epoch 2's first) never finished
    resumed = launch([{"config": cfg}])
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    for rank in (0, 1):
        want = [(e, p, b) for e in range(2) for p, b in enumerate(micro_batches(N, TrainConfig(**cfg), e, rank, 2))]
        assert seen(out, rank) == want[:6]
    assert_same_weights(out, one_rank["offline"])
