"""Featurize: conversations -> target features in shards (see features.py), resumable shard by shard."""
from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from eagle_infer.chat import Message, loss_mask, prompt_ids, render
from eagle_infer.errors import EagleError

from .features import Manifest, shard_name, write_shard

log = logging.getLogger(__name__)
OVERLONG = ("truncate", "skip")


@dataclass
class FeaturizeConfig:
    max_length: int = 1024
    overlong: str = "truncate"  # or "skip"
    batch_tokens: int = 4096  # padded tokens per target forward
    shard_size: int = 256  # conversations per shard
    store_dtype: str = "bfloat16"
    regenerate: bool = False  # replace assistant turns with the target's own greedy answers
    regenerate_max_new_tokens: int = 256
    regenerate_turns: int = 2  # user turns kept when regenerating


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


@torch.inference_mode()
def target_features(target, sequences: list[list[int]]) -> list[torch.Tensor]:
    """Right-padded batched forward; returns each sequence's features [T_i, H]."""
    longest = max(len(s) for s in sequences)
    ids = torch.zeros(len(sequences), longest, dtype=torch.long)
    attn = torch.zeros(len(sequences), longest, dtype=torch.long)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = torch.tensor(seq)
        attn[row, : len(seq)] = 1
    out = target.model.model(input_ids=ids.to(target.device), attention_mask=attn.to(target.device))
    hidden = out.last_hidden_state.cpu()
    return [hidden[row, : len(seq)] for row, seq in enumerate(sequences)]


@torch.inference_mode()
def regenerate(conversations: list[list[Message]], target, cfg: FeaturizeConfig, batch_size: int = 8) -> list[list[Message] | None]:
    """Replace assistant turns with the target's greedy answers, turn by turn (the EAGLE 'data by the target' option).

    A conversation whose prompt would leave less than regenerate_max_new_tokens of max_length becomes None.
    Batched (left-padded) with transformers' generate: this is data preparation; decoding for evaluation goes
    through the engine.
    """
    users = [[m for m in conv if m.role == "user"][: cfg.regenerate_turns] for conv in conversations]
    chats: list[list[Message] | None] = [[m for m in conv[:1] if m.role == "system"] for conv in conversations]
    pad = target.tokenizer.pad_token_id if target.tokenizer.pad_token_id is not None else 0
    eos = target.tokenizer.eos_token_id
    room = cfg.max_length - cfg.regenerate_max_new_tokens
    for turn in range(max(len(u) for u in users)):
        prompts = {}
        for i, u in enumerate(users):
            if chats[i] is not None and turn < len(u):
                ids = prompt_ids(target.tokenizer, chats[i] + [u[turn]], target.template)
                if len(ids) <= room:
                    prompts[i] = ids
                elif turn == 0:
                    chats[i] = None
        order = sorted(prompts, key=lambda i: len(prompts[i]))  # similar lengths share a batch: less padding
        for start in tqdm(range(0, len(order), batch_size), desc=f"regenerate turn {turn + 1}", leave=False):
            rows = order[start : start + batch_size]
            longest = max(len(prompts[i]) for i in rows)
            ids = torch.tensor([[pad] * (longest - len(prompts[i])) + prompts[i] for i in rows], device=target.device)
            attn = torch.tensor([[0] * (longest - len(prompts[i])) + [1] * len(prompts[i]) for i in rows], device=target.device)
            out = target.model.generate(
                input_ids=ids, attention_mask=attn, max_new_tokens=cfg.regenerate_max_new_tokens, do_sample=False,
                pad_token_id=pad, eos_token_id=eos,
            )
            for row, i in enumerate(rows):
                answer = target.tokenizer.decode(out[row, longest:], skip_special_tokens=True).strip()
                chats[i] += [users[i][turn], Message("assistant", answer)]
    return chats


def featurize(conversations: list[list[Message]], target, out_dir: str | Path, cfg: FeaturizeConfig) -> Manifest:
    """Write feature shards for `conversations` (in this order) to out_dir; finished shards are kept on a rerun."""
    if cfg.overlong not in OVERLONG:
        raise EagleError(f"unknown overlong policy {cfg.overlong!r}: expected one of {', '.join(OVERLONG)}")
    if not conversations:
        raise EagleError("no usable conversation to featurize: check the dataset source and its filters")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fingerprint = hashlib.sha1(
        json.dumps([[(m.role, m.content) for m in conv] for conv in conversations]).encode() + str(cfg.shard_size).encode()
    ).hexdigest()
    fresh = Manifest(
        target.name, target.hidden_size, target.vocab_size, target.template, cfg.store_dtype, cfg.max_length,
        cfg.overlong, cfg.regenerate, fingerprint,
    )
    manifest = Manifest.load(out) if (out / "manifest.json").exists() else fresh
    for key in ("target", "template", "dtype", "max_length", "overlong", "regenerate", "fingerprint"):
        if getattr(manifest, key) != getattr(fresh, key):
            raise EagleError(
                f"{str(out)!r} already holds features with {key}={getattr(manifest, key)!r}, not {getattr(fresh, key)!r}: "
                "use another output directory"
            )
    store = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[cfg.store_dtype]
    done = {s["file"] for s in manifest.shards if s["conversations"] == 0 or (out / s["file"]).exists()}
    n_shards = (len(conversations) + cfg.shard_size - 1) // cfg.shard_size
    todo = [i for i in range(n_shards) if shard_name(i) not in done]
    if len(todo) < n_shards:
        log.info("resuming: %d of %d shards already done", n_shards - len(todo), n_shards)
    bar = tqdm(total=sum(min(cfg.shard_size, len(conversations) - i * cfg.shard_size) for i in todo), unit="conv")
    forward_s, tokens_done = 0.0, 0
    for index in todo:
        chunk = conversations[index * cfg.shard_size : (index + 1) * cfg.shard_size]
        if cfg.regenerate:
            chunk = regenerate(chunk, target, cfg)
        encoded, skipped = [], {}
        for conv in chunk:
            result = "overlong_prompt" if conv is None else _encode(conv, target, cfg)
            if isinstance(result, str):
                skipped[result] = skipped.get(result, 0) + 1
            else:
                encoded.append(result)
        hidden: list = [None] * len(encoded)
        for batch in _batches([len(ids) for ids, _ in encoded], cfg.batch_tokens):
            start = time.perf_counter()
            for i, h in zip(batch, target_features(target, [encoded[i][0] for i in batch])):
                hidden[i] = h
            forward_s += time.perf_counter() - start
            tokens_done += sum(len(encoded[i][0]) for i in batch)
            bar.update(len(batch))
            bar.set_postfix(featurize_tok_s=f"{tokens_done / forward_s:.0f}")
        bar.update(len(chunk) - len(encoded))
        samples = [(ids, mask, h) for (ids, mask), h in zip(encoded, hidden)]
        tokens = write_shard(out / shard_name(index), samples, store) if samples else 0
        manifest.shards = [s for s in manifest.shards if s["file"] != shard_name(index)] + [
            {"file": shard_name(index), "conversations": len(samples), "tokens": tokens,
             "loss_tokens": sum(sum(m) for _, m, _ in samples), "skipped": skipped}
        ]
        manifest.shards.sort(key=lambda s: s["file"])
        manifest.conversations = sum(s["conversations"] for s in manifest.shards)
        manifest.tokens = sum(s["tokens"] for s in manifest.shards)
        manifest.loss_tokens = sum(s["loss_tokens"] for s in manifest.shards)
        manifest.skipped = {}
        for s in manifest.shards:
            for k, v in s["skipped"].items():
                manifest.skipped[k] = manifest.skipped.get(k, 0) + v
        manifest.save(out)
    bar.close()
    if forward_s:
        log.info("target forwards: %d tokens in %.1f s (%.0f tokens/s)", tokens_done, forward_s, tokens_done / forward_s)
    if manifest.conversations == 0:
        raise EagleError(f"no usable conversation in {str(out)!r}: all were skipped ({manifest.skipped})")
    return manifest
