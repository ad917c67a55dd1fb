"""Featurize: conversations -> target features in shards (see features.py), resumable shard by shard."""
from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch
from tqdm import tqdm

from eagle_infer.models.chat import Message, loss_mask, render
from eagle_infer.config import InferConf
from eagle_infer.head.draft_head import eagle3_layers
from eagle_infer.decoding.engine import Engine
from eagle_infer.errors import EagleError
from eagle_infer.platform import machine_facts

from .shards import Manifest, shard_name, stats_name, write_shard
from .disk import ID_BYTES, check_disk
from .data_size import estimate_data
from ..data.regenerate import RegenerateSettings, answer_shards, regenerated_shard
from .states import flash_attention, target_features

log = logging.getLogger(__name__)
OVERLONG = ("truncate", "skip")


FEATURES = ("last", "fused")


@dataclass
class FeaturizeConfig:
    """features: "last" stores the post-norm last hidden state (EAGLE-1/2 heads); "fused" also stores the outputs of
    EAGLE-3's low/middle/high layers (`aux`), so one feature directory trains both kinds of head. rank/world: this
    process featurizes shards rank, rank + world, ... of the directory (the manifest merges every rank's shards); under
    the deepspeed launcher (make train NGPU=N) stage=featurize sets them from RANK and WORLD_SIZE."""

    max_length: int = 1024
    overlong: str = "truncate"  # or "skip"
    batch_tokens: int = 4096  # padded tokens per target forward
    shard_size: int = 256  # conversations per shard
    store_dtype: str = "bfloat16"
    features: str = "last"
    regenerate: bool = False  # replace assistant turns with the target's own greedy answers
    regenerate_fraction: float = 1.0  # mix ratio: share of conversations regenerated (the rest keep the dataset's)
    regenerate_max_new_tokens: int = 256
    regenerate_turns: int = 2  # user turns kept when regenerating
    regenerate_batch_size: int = 32  # requests the engine decodes together
    # where a stage writes text (regenerated answers, self-written prompts): decode through the compiled target
    # (infer.compile: inductor, CUDA graphs on a GPU); not a recorded setting. On a CPU it skips packing the weights,
    # costs minutes of warm-up per process and was slower than the eager target (CHANGELOG).
    compile: bool = False
    rank: int = 0
    world: int = 1
    max_shards: Optional[int] = None  # featurize only the first N shards (a rerun with more extends the directory)

    def feature_layers(self, target, fused: list[int] | None = None) -> list[int]:
        """The decoder layers whose outputs are stored: none, or for "fused" `fused` (the head's head.feature_layers)
        or EAGLE-3's low/middle/high layers."""
        if self.features not in FEATURES:
            raise EagleError(f"unknown featurize.features {self.features!r}: expected one of {', '.join(FEATURES)}")
        if self.features != "fused":
            return []
        return list(fused or eagle3_layers(target.config.num_hidden_layers))

    def regenerate_settings(self) -> RegenerateSettings:
        return RegenerateSettings(self.regenerate_fraction, self.regenerate_turns, self.regenerate_max_new_tokens,
                                  self.max_length)


def check_ranks(conversations: int, cfg: FeaturizeConfig) -> None:
    """A one-line error when the training conversations make fewer shards than there are ranks to featurize them."""
    shards = (conversations + cfg.shard_size - 1) // cfg.shard_size
    if cfg.world > shards:
        raise EagleError(f"featurize on {cfg.world} ranks, but the {conversations} training conversations make "
                         f"{shards} shard(s) of featurize.shard_size {cfg.shard_size}: expected at most {shards} "
                         "ranks, or a smaller featurize.shard_size")


def _encode(conv: list[Message], target, cfg: FeaturizeConfig) -> tuple[list[int], list[int]] | str:
    """(input_ids, loss_mask) or the reason it is skipped."""
    ids, mask = loss_mask(target.tokenizer, render(conv, target.tokenizer, target.template, False), None)
    if len(ids) > cfg.max_length:
        if cfg.overlong == "skip":
            return "overlong"
        ids, mask = ids[: cfg.max_length], mask[: cfg.max_length]
    if sum(mask[2:]) == 0:  # the head is trained on positions predicting token i + 2
        return "no_loss_tokens"
    return ids, mask


def _batches(lengths: list[int], batch_tokens: int) -> list[list[int]]:
    """Group indices sorted by length so that each padded batch stays under batch_tokens."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches, cur = [], []
    for i in order:
        if cur and (len(cur) + 1) * lengths[i] > batch_tokens:
            batches.append(cur)
            cur = []
        cur.append(i)
    return batches + ([cur] if cur else [])


def regeneration_engine(target, cfg: FeaturizeConfig):
    """The engine that answers prompts for regeneration: vanilla greedy decoding, cfg.regenerate_batch_size rows."""
    return Engine(target, None, InferConf(method="vanilla", max_batch_size=cfg.regenerate_batch_size))


def _check_room(conversations, todo: list[int], out: Path, cfg: FeaturizeConfig, state_bytes: int) -> None:
    """Refuse to start, in one line, when the shards still to write (estimated as eagle_train.features.data_size does: characters
    to tokens, `state_bytes` a token beside its id and mask) do not fit on out's disk."""
    chunks = [c for i in todo for c in conversations[i * cfg.shard_size : (i + 1) * cfg.shard_size]]
    size = estimate_data(chunks, cfg.max_length, cfg.regenerate, cfg.regenerate_max_new_tokens, cfg.regenerate_turns)
    what = f"featurize ({size.tokens:,} tokens estimated, {'states' if state_bytes else 'tokens only'})"
    check_disk(size.tokens * (ID_BYTES + state_bytes), out, what)


def _shard_done(out: Path, index: int) -> bool:
    """A shard is done when its count file exists and so does its data (a shard with no usable conversation has none)."""
    stats = out / stats_name(index)
    return stats.exists() and (json.loads(stats.read_text())["conversations"] == 0 or (out / shard_name(index)).exists())


def _check_resume(manifest: Manifest, fresh: Manifest, out: Path) -> None:
    """Refuse to add shards to a directory featurized from other data or with other settings, naming the value."""
    keys = ("target", "template", "dtype", "max_length", "overlong", "regenerate", "regenerate_fraction",
            "feature_layers", "fingerprint", "forward_dtype", "states")
    for key in keys:
        if key == "forward_dtype" and not manifest.forward_dtype:  # made before it was recorded
            continue
        if getattr(manifest, key) != getattr(fresh, key):
            raise EagleError(
                f"{str(out)!r} already holds features with {key}={getattr(manifest, key)!r}, not {getattr(fresh, key)!r}: "
                "use another output directory (nothing there was changed)"
            )


def featurize(conversations: list[list[Message]], target, out_dir: str | Path, cfg: FeaturizeConfig,
              states: bool = True, fused: list[int] | None = None) -> Manifest:
    """Write feature shards for `conversations` (in this order) to out_dir; finished shards are kept on a rerun.
    This process does shards cfg.rank, cfg.rank + cfg.world, ...; with regenerate, a shard's answers are taken from
    out_dir/regenerated when present (see regenerate.py), else generated first. states=False writes tokens and loss
    masks only, no target forward (a token directory: training computes the states, train.features=online|cached).
    fused: the fused layers stored (head.feature_layers; None: FeaturizeConfig.feature_layers' default)."""
    if cfg.overlong not in OVERLONG:
        raise EagleError(f"unknown overlong policy {cfg.overlong!r}: expected one of {', '.join(OVERLONG)}")
    if not 0 <= cfg.rank < cfg.world:
        raise EagleError(f"featurize rank {cfg.rank} of world {cfg.world} is invalid: expected 0 <= rank < world")
    if cfg.max_shards is not None and cfg.max_shards < 1:
        raise EagleError(f"featurize.max_shards {cfg.max_shards} is invalid: expected >= 1 or null (all shards)")
    if not conversations:
        raise EagleError("no usable conversation to featurize: check the dataset source and its filters")
    layers = cfg.feature_layers(target, fused) if states else []
    if cfg.regenerate:
        cfg.regenerate_settings().check()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fingerprint = hashlib.sha1(
        json.dumps([[(m.role, m.content) for m in conv] for conv in conversations]).encode() + str(cfg.shard_size).encode()
    ).hexdigest()
    fresh = Manifest(
        target.name, target.hidden_size, target.vocab_size, target.template, cfg.store_dtype, cfg.max_length,
        cfg.overlong, cfg.regenerate, fingerprint, cfg.regenerate_fraction if cfg.regenerate else 0.0, layers,
        str(target.dtype).removeprefix("torch."), states,
    )
    manifest = Manifest.load(out) if (out / "manifest.json").exists() else fresh
    _check_resume(manifest, fresh, out)
    store = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[cfg.store_dtype]
    n_shards = (len(conversations) + cfg.shard_size - 1) // cfg.shard_size
    mine = range(cfg.rank, min(n_shards, cfg.max_shards or n_shards), cfg.world)
    todo = [i for i in mine if not _shard_done(out, i)]
    _check_room(conversations, todo, out, cfg, store.itemsize * target.hidden_size * (1 + len(layers)) if states else 0)
    if len(todo) < len(mine):
        log.info("resuming: %d of this rank's %d shards already done", len(mine) - len(todo), len(mine))
    engine = regeneration_engine(target, cfg) if cfg.regenerate else None
    if engine is not None and cfg.regenerate_turns == 1:  # every missing answer first, in one continuous batch
        _answer_ahead(conversations, todo, out, engine, cfg)
    bar = tqdm(total=sum(min(cfg.shard_size, len(conversations) - i * cfg.shard_size) for i in todo), unit="conv")
    forward_s, tokens_done, regen_s, regen_tokens = 0.0, 0, 0.0, 0
    for index in todo:
        chunk = conversations[index * cfg.shard_size : (index + 1) * cfg.shard_size]
        if cfg.regenerate:
            chunk, info = regenerated_shard(chunk, index, out, engine, cfg.regenerate_settings(), cfg.regenerate_batch_size)
            regen_s, regen_tokens = regen_s + info["regenerate_s"], regen_tokens + (info["answer_tokens"] if info["regenerate_s"] else 0)
        encoded, skipped = [], {}
        for conv in chunk:
            result = "overlong_prompt" if conv is None else _encode(conv, target, cfg)
            if isinstance(result, str):
                skipped[result] = skipped.get(result, 0) + 1
            else:
                encoded.append(result)
        hidden: list = [(None, None)] * len(encoded)
        shard_forward_s = forward_s
        with flash_attention(target):
            for batch in _batches([len(ids) for ids, _ in encoded], cfg.batch_tokens) if states else []:
                start = time.perf_counter()
                for i, h in zip(batch, target_features(target, [encoded[i][0] for i in batch], layers)):
                    hidden[i] = h
                forward_s += time.perf_counter() - start
                tokens_done += sum(len(encoded[i][0]) for i in batch)
                bar.update(len(batch))
                bar.set_postfix(featurize_tok_s=f"{tokens_done / forward_s:.0f}")
        bar.update(len(chunk) - (len(encoded) if states else 0))
        samples = [(ids, mask, h, a) for (ids, mask), (h, a) in zip(encoded, hidden)]
        tokens = write_shard(out / shard_name(index), samples, store) if samples else 0
        stats = {"file": shard_name(index), "conversations": len(samples), "tokens": tokens,
                 "loss_tokens": sum(sum(m) for _, m, _, _ in samples), "skipped": skipped,
                 "forward_s": round(forward_s - shard_forward_s, 4), **machine_facts(target)}
        tmp = out / (stats_name(index) + ".tmp")
        tmp.write_text(json.dumps(stats) + "\n")
        tmp.rename(out / stats_name(index))
        manifest.save(out)
    bar.close()
    if regen_s:
        log.info("regenerate: %d answer tokens in %.1f s (%.0f tokens/s)", regen_tokens, regen_s, regen_tokens / regen_s)
    if forward_s:
        log.info("target forwards: %d tokens in %.1f s (%.0f tokens/s)", tokens_done, forward_s, tokens_done / forward_s)
    manifest = Manifest.load(out)
    disk = sum(p.stat().st_size for p in out.glob("shard-*.safetensors"))
    if manifest.tokens and states:
        log.info("disk: %.0f MB for %d tokens (%.0f MB per million tokens)", disk / 1e6, manifest.tokens,
                 disk / manifest.tokens)
    if manifest.conversations == 0 and len(todo) == len(mine) and cfg.world == 1:
        raise EagleError(f"no usable conversation in {str(out)!r}: all were skipped ({manifest.skipped})")
    return manifest


def _answer_ahead(conversations: list[list[Message]], indices, out: Path, engine, cfg: FeaturizeConfig) -> int:
    """answer_shards over the shards `indices` of `conversations`; returns the shards answered."""
    chunks = {i: conversations[i * cfg.shard_size : (i + 1) * cfg.shard_size] for i in indices}
    return answer_shards(chunks, out, engine, cfg.regenerate_settings(), cfg.regenerate_batch_size)


def regenerate_only(conversations: list[list[Message]], target, out_dir: str | Path, cfg: FeaturizeConfig) -> int:
    """Answer this rank's shards into out_dir/regenerated without featurizing (e.g. on a GPU machine, for a
    featurize run elsewhere). Returns the shards answered now."""
    if not cfg.regenerate:
        raise EagleError("stage=regenerate needs featurize.regenerate=true")
    cfg.regenerate_settings().check()
    out = Path(out_dir)
    engine = regeneration_engine(target, cfg)
    n_shards = (len(conversations) + cfg.shard_size - 1) // cfg.shard_size
    mine = range(cfg.rank, n_shards, cfg.world)
    if cfg.regenerate_turns == 1:
        return _answer_ahead(conversations, mine, out, engine, cfg)
    done = 0
    for index in tqdm(mine, desc="regenerate shards"):
        chunk = conversations[index * cfg.shard_size : (index + 1) * cfg.shard_size]
        _, info = regenerated_shard(chunk, index, out, engine, cfg.regenerate_settings(), cfg.regenerate_batch_size)
        done += bool(info["regenerate_s"])
    return done
