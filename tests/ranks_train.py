"""A training process for tests/test_train_ranks.py, started on N ranks by DeepSpeed's launcher:
`deepspeed --num_gpus N --no_local_rank tests/ranks_train.py '<runs JSON>'`. Each run of the JSON list is
{"config": TrainConfig fields, "crash_at": optional micro batch (1-based, this process's) at which rank
"crash_rank" dies with os._exit, as a killed process would}. The target is the tests' tiny float32 Llama over
SmolLM2's vocabulary (tests/conftest.py)."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import eagle_train.training.train as train_mod
from eagle_train.training.train import TrainConfig, train
from tests.conftest import make_tiny_smol, smol_tokenizer  # noqa: E402


def dying_at(n: int):
    """train_mod.losses that ends this process at its n-th training call."""
    real, calls = train_mod.losses, []

    def losses(head, batch, *args, **kwargs):
        if head.training:
            calls.append(1)
            if len(calls) == n:
                os._exit(3)
        return real(head, batch, *args, **kwargs)
    return losses


def main() -> None:
    target = make_tiny_smol(smol_tokenizer())
    for run in json.loads(sys.argv[1]):
        if run.get("crash_at") and int(os.environ["RANK"]) == run["crash_rank"]:
            train_mod.losses = dying_at(run["crash_at"])
        train(TrainConfig(**run["config"]), target)


if __name__ == "__main__":
    main()
