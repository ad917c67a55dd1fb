"""Score a saved head on a held-out feature split, as training scores it: `python -m eagle_train.training.score_head head=HEAD
features=FEATURES [conversations=32]` (conf/command/score_head.yaml) prints held-out top-1, top-3 and simulated
chain acceptance 0-α…6-α (JSON), in float32, on the split's first `conversations` conversations (training's
train.eval_conversations).

Heads trained on different machines or at different times can be compared on one split this way: an ablation row's
held-out columns come from the split it trained against, and a split regenerated on another machine (other greedy
answers) moves them a little (docs/training.md).
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from eagle_infer.entry.cli_support import one_line_errors
from eagle_infer.errors import EagleError
from eagle_infer.head.head_checkpoint import load_head
from eagle_infer.models.target import load_target

from ..plumbing.command_line import command_settings
from ..features.shards import Manifest, read_samples
from .train import evaluate


def score(head_dir: str, features: str, conversations: int = 32, target=None) -> dict[str, float]:
    """Held-out metrics (training's `evaluate`: heldout/top1, heldout/top3, heldout/alpha_k, the default objective's
    losses) of the head in `head_dir` on the first `conversations` of the feature split `features`; `target`: the
    features' target loaded in float32 (None: loaded here by the name their manifest records)."""
    if conversations < 1:
        raise EagleError(f"--conversations {conversations} is invalid: expected >= 1")
    manifest = Manifest.load(features)
    target = target or load_target(manifest.target, "float32")
    manifest.check_target(target, features)
    head = load_head(head_dir, target)
    samples = read_samples(features, aux=head.config.fused)[:conversations]
    return evaluate(head, samples, target.dtype, target.device)


@dataclass
class ScoreSettings:
    head: str
    features: str
    conversations: int


@one_line_errors
def main(argv: list[str] | None = None) -> None:
    args = command_settings("score_head", ScoreSettings, argv)
    result = score(args.head, args.features, args.conversations)
    print(json.dumps({"head": args.head, "features": args.features, "conversations": args.conversations,
                      **{k: round(v, 4) for k, v in result.items()}}, indent=1))


if __name__ == "__main__":
    main()
